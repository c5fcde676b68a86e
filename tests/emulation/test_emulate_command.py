"""``grouper emulate`` end to end on a workload of its own, run twice: cojobs that
arrive together reach the coordinator in workload order in both runs, and the report
puts the runs' mean beside the prediction, with each run's TCP counters and the CPU the
hypervisor took."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.netns import GROUPER

# three one-job searches, all at time 0, listed against alphabetical order: were the
# coordinator to see them in the order the event loop happened to run them, or by id,
# FIFO's tie would go another way than the simulator's (workload order)
COJOBS = ("gamma", "beta", "alpha")


def _workload(path) -> None:
    hosts = [("h1", "h4"), ("h2", "h5"), ("h3", "h6")]
    cojobs = [
        {
            "id": cid,
            "arrival": 0,
            "stages": [2],
            "jobs": [{"id": "j", "arch": "ps", "model_bytes": 2e5, "workers": [w],
                      "servers": [s]}],
        }
        for cid, (w, s) in zip(COJOBS, hosts, strict=True)
    ]  # fmt: skip
    doc = {"name": "ties", "topology": "leafspine:2,2,3,0.02,uplink=0.06", "cojobs": cojobs}
    path.write_text(yaml.safe_dump(doc))


def test_emulate_reports_the_mean_of_runs_and_ties_follow_the_workload_order(tmp_path):
    wl, js = tmp_path / "ties.yaml", tmp_path / "res.json"
    _workload(wl)
    # from a directory of its own, with the default output folder (relative to it): the
    # agents it starts get absolute paths, so they come up wherever the runner is
    run = subprocess.run(
        [*GROUPER, "emulate", "--experiment", str(wl), "--policies", "baraat",
         "--runs", "2", "--json", str(js)],
        cwd=tmp_path, check=True, timeout=300, capture_output=True, text=True,
    )  # fmt: skip
    out = tmp_path / "results" / "emulate" / "ties"
    assert "CPU stolen" in run.stdout
    doc = json.loads(js.read_text())
    assert doc["congestion_control"] == "bbr" and doc["link_delay_ms"] == 0.0
    res = doc["results"]["baraat"]
    assert res["stages"] == 3 and res["predicted_avg_sct"] > 0
    assert len(res["runs"]) == 2 and all(r["avg_sct"] > 0 for r in res["runs"])
    assert res["avg_sct"] == pytest.approx(sum(res["avg_sct_runs"]) / 2)
    for run in res["runs"]:
        steal = run["cpu_steal"]
        assert 0.0 <= steal["mean"] <= 1.0 and 0.0 <= steal["max"] <= 1.0
        assert run["tcp"]["segments_sent"] > 0
        # every host ran the congestion control named; the connections sampled (a run
        # this short may end between two samples: test_small checks their paths)
        assert set(run["congestion_control"].values()) == {"bbr"}, run["congestion_control"]
        assert isinstance(run["connections"], list)
    for k in (1, 2):
        log = (out / f"baraat-{k}" / "coordinator.log").read_text()
        # the coordinator's info line per change of order (" (+N more)" past 12 stages)
        orders = [m.split(" (+")[0].split(" > ") for m in re.findall(r" order: (.*)", log)]
        full = [o for o in orders if {f"{c}/1" for c in COJOBS} <= set(o)]
        assert full, orders
        assert full[0] == [f"{c}/1" for c in COJOBS]
