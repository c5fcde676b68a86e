"""``grouper calibrate`` on the emulated fabric: real TCP rings between two hosts, the
fit reported with its residuals and confidence, and refused by ``--write`` (a fit pinned
at its bounds is not a measurement; writing a sound fit is tested on synthetic data in
``tests/unit/test_calibration.py``)."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.netns import GROUPER, ROOT

SAMPLE = ROOT / "docs" / "cluster.sample.yaml"


def test_calibrate_measures_the_links_rate_and_refuses_to_store_a_pinned_fit(tmp_path):
    """The fabric's fit is measured and reported in full, but not written: k rings here
    take at most k times one (eta pinned at 0), and two sizes leave a and b without
    confidence. Exit 2, one line, the config untouched (the old test asserted
    ``a >= 0 and eta >= 0``, which the clamp guaranteed whatever was measured)."""
    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(SAMPLE.read_text())
    out = tmp_path / "cal.json"
    proc = subprocess.run(
        [*GROUPER, "calibrate", "--sizes", "0.25,0.5", "--max-k", "3", "--reps", "3",
         "--out", str(tmp_path / "plot"), "--write", str(cfg), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("grouper: error: --write: not written: ")
    assert proc.stderr.count("\n") == 1 and "try " in proc.stderr, proc.stderr
    assert cfg.read_text() == SAMPLE.read_text(), "a refused fit leaves the config as it was"
    res = json.loads(out.read_text())
    assert res["written"] is None and res["problems"][0] in proc.stderr
    assert "a and b have no confidence" in " ".join(res["problems"])
    # builtin:small's host links are 20 Mbit/s: a two-host ring moves M bytes each way.
    # Measured b: 1.13-1.22 x this in full runs; one short run gave 0.97 x (a 0.25 MB
    # ring in 83 ms: the shaper's burst at the start of a transfer), and short runs while
    # the VM lost 4-21% of its CPU to steal 1.6 and 1.75 x. Half or twice the bytes on
    # the wire (a wrong chunk size) would be 0.5-0.6 or 2.2-2.4 x.
    ideal = 8 / (res["link_mbps"] * 1e6)
    assert 0.8 * ideal <= res["b"] <= 1.9 * ideal, res["b"]
    times = {(s["k"], s["bytes"]): s["measured"] for s in res["samples"]}
    assert len(times) == 6
    # k rings together take about k times as long (tasks that barely overlapped, as a
    # version without the start barrier measured, would give about 1); one k = 1 round
    # slowed by a loss made k = 3 only 2.28 x once, with two rounds per point (now three)
    for size in (0.25e6, 0.5e6):
        assert 1.5 < times[(2, size)] / times[(1, size)] < 2.6
        assert 2.0 < times[(3, size)] / times[(1, size)] < 3.9
    assert (tmp_path / "plot" / "contention.png").stat().st_size > 0


def test_calibrate_star_sends_each_task_from_another_host_to_the_first(tmp_path):
    out = tmp_path / "cal.json"
    subprocess.run(
        [*GROUPER, "calibrate", "--pattern", "star", "--sizes", "0.25,0.5", "--max-k", "2",
         "--reps", "2", "--json", str(out)],
        cwd=tmp_path, check=True, timeout=240,  # any directory, the default output folder
    )  # fmt: skip
    res = json.loads(out.read_text())
    plot = Path(res["files"][0])  # in a new temporary directory, which the test removes
    try:
        assert plot.parent.parent == Path(tempfile.gettempdir()), plot
        assert plot.parent.name.startswith("grouper-calibrate-") and plot.is_file()
    finally:
        if plot.parent.name.startswith("grouper-calibrate-"):
            shutil.rmtree(plot.parent)
    assert res["pattern"] == "star" and len(res["samples"]) == 4
    times = {(s["k"], s["bytes"]): s["measured"] for s in res["samples"]}
    for size in (0.25e6, 0.5e6):  # two senders into one host's downlink overlap
        assert 1.3 < times[(2, size)] / times[(1, size)] < 2.6


def _agents(tmp_path):
    from grouper.common.queues import QueueConfig
    from grouper.experiments.emulation import Emulation
    from grouper.experiments.spec import load_experiment, spec_of

    spec = spec_of(load_experiment("builtin:small"), QueueConfig())
    return Emulation(spec, "fs", 1.0, tmp_path / "emu")  # agents only, no coordinator


def test_calibrate_with_config_runs_the_traffic_through_the_hosts_agents(tmp_path):
    emu = _agents(tmp_path)
    out = tmp_path / "cal.json"
    try:
        emu.start()
        # three sizes: with two, b is the slope between two medians, and a sustained VM
        # slowdown during the 0.25 MB point once set b to 0.38 x the link's ideal
        # three rounds a point: the median of two is their mean, and one round of k = 3 at
        # 1 MB slowed by TCP timeouts once made that point 3.90 x k = 1 (1.65 s, 1.27 s
        # ideal; a CI run); the median of three holds against one such round
        args = ["--sizes", "0.25,0.5,1", "--max-k", "3", "--reps", "3", "--json", str(out)]
        subprocess.run(
            [*GROUPER, "calibrate", "--config", str(emu.config), "--hosts", "h1,h4",
             "--out", str(tmp_path / "plot"), *args],
            cwd=ROOT, check=True, timeout=240,
        )  # fmt: skip
        # two rounds (six for k = 1): with one, two slow k = 1 rounds of three once
        # made 0.25 MB slower than 0.5 MB, and the fit refused b < 0 (exit 2)
        star = subprocess.run(
            [*GROUPER, "calibrate", "--config", str(emu.config), "--pattern", "star",
             "--sizes", "0.25,0.5", "--max-k", "2", "--reps", "2", "--json", "-",
             "--out", str(tmp_path / "star-plot")],
            cwd=ROOT, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        logs = "".join((emu.work / f"{h}-agent.log").read_text() for h in ("h1", "h4"))
    finally:
        emu.stop()
    res = json.loads(out.read_text())
    assert res["cluster"] == "emulated" and res["hosts"] == ["h1", "h4"]
    # the agents' rings cross the same 20 Mbit/s links as the fabric calibration's
    # (bounds: see the first test)
    ideal = 8 / (res["link_mbps"] * 1e6)
    assert 0.8 * ideal <= res["b"] <= 1.9 * ideal, res["b"]
    times = {(s["k"], s["bytes"]): s["measured"] for s in res["samples"]}
    assert len(times) == 9
    # k tasks really ran at once (tasks one after another would give about 1); a CI run
    # measured 1.49 for k = 2 at 0.25 MB (a 105 ms ring, where the shaper's burst at the
    # start of a transfer weighs most), so the lower bounds sit just under halfway
    # between 1 and k
    for size in (0.25e6, 0.5e6, 1e6):
        assert 1.4 < times[(2, size)] / times[(1, size)] < 2.6
        assert 1.9 < times[(3, size)] / times[(1, size)] < 3.9
    assert star.returncode == 0, star.stderr
    res_star = json.loads(star.stdout)
    assert res_star["pattern"] == "star" and len(res_star["samples"]) == 4
    assert "Traceback" not in logs
