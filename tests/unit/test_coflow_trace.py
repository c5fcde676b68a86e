"""The coflow benchmark's trace format (``--workload coflow:PATH``): what is read, and
one line naming the line and the field (exit 2) for a bad line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from grouper.common.errors import ConfigError
from grouper.workloads import load_workload
from grouper.workloads.coflow_trace import MB, parse_coflow_trace

SMALL = """4 3
1 0 2 0 1 2 2:4.0 3:2.0
2 1500 1 1 2 1:8.0 3:1.0
3 2000 1 2 1 2:5.0
"""


def test_bytes_split_evenly_over_mappers_and_local_pairs_left_out() -> None:
    trace = parse_coflow_trace(SMALL)
    assert trace.ports == 4
    assert trace.ids == ["1", "2"]
    assert trace.arrival == [0.0, 1.5]
    src, dst, size = trace.flows[0]
    got = sorted(zip(src.tolist(), dst.tolist(), size.tolist(), strict=True))
    assert got == [(0, 2, 2 * MB), (0, 3, MB), (1, 2, 2 * MB), (1, 3, MB)]
    src, dst, size = trace.flows[1]  # mapper 1 -> reducer 1 is local: not on the fabric
    assert list(zip(src.tolist(), dst.tolist(), size.tolist(), strict=True)) == [(1, 3, MB)]
    assert trace.skipped == ["3"]  # its one mapper is its one reducer's port


def test_workload_is_one_stage_cojob_per_coflow_on_a_big_switch(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(SMALL)
    wl = load_workload(f"coflow:{path}", link_gbps=10.0, seed=3)
    assert wl.hosts == ("p0", "p1", "p2", "p3")
    assert wl.capacity == pytest.approx(10e9 / 8)
    assert [c.cojob_id for c in wl.cojobs] == ["1", "2"]
    assert all(c.stage_iterations == (1,) and len(c.jobs) == 1 for c in wl.cojobs)
    assert wl.cojobs[1].arrival == 1.5
    assert len(wl.cojobs[0].jobs[0].flows) == 4
    assert wl.contention == "none"
    half = load_workload(f"coflow:{path}", fraction=0.5)
    assert [c.cojob_id for c in half.cojobs] == ["1"]


def test_simulate_runs_a_trace_end_to_end(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(SMALL)
    from grouper.simulator.run import run_policies

    runs = run_policies(load_workload(f"coflow:{path}"), ["fs", "grouper"], progress=False)
    # coflow 1 alone: ports 2 and 3 receive 4 MB and 2 MB from two mappers at 125 MB/s
    # (1 Gbit/s); coflow 2 (1 MB from port 1 to 3) arrives at 1.5 s, after coflow 1
    first = [s for s in runs["fs"].result.stages if s["cojob"] == "1"][0]
    assert first["sct"] == pytest.approx(4 * MB / 125e6)
    assert runs["grouper"].summary["stages"] == 2


BAD = [
    ("4 2\n1 0 1 0 1 2:4.0\n", "line 1: coflows"),
    ("four 1\n1 0 1 0 1 2:4.0\n", "line 1: ports"),
    ("4 1\n1 zero 1 0 1 2:4.0\n", "line 2: arrival"),
    ("4 1\n1 0 1 9 1 2:4.0\n", "line 2: mappers[0]"),
    ("4 1\n1 0 3 0 1\n", "line 2: mappers"),
    ("4 1\n1 0 1 0 2 2:4.0\n", "line 2: reducers"),
    ("4 1\n1 0 1 0 1 2-4.0\n", "line 2: reducers[0]"),
    ("4 1\n1 0 1 0 1 7:4.0\n", "line 2: reducers[0].port"),
    ("4 2\n1 0 1 0 1 2:4.0\n\n2 5 1 0 1 3:nan\n", "line 4: reducers[0].mb"),
    ("4 2\n1 0 1 0 1 2:4.0\n1 5 1 0 1 3:1\n", "line 3: id"),
]


@pytest.mark.parametrize(("text", "where"), BAD)
def test_bad_line_names_the_line_and_the_field(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_coflow_trace(text, "t")
    assert exc.value.path == f"t {where}"


def test_bad_trace_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("4 2\n1 0 1 0 1 2:4.0\n2 5 1 0 1 3:-1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "simulate", "--workload", f"coflow:{path}"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "bad line 3: reducers[0].mb" in lines[0]
    assert "Traceback" not in proc.stderr


def test_link_gbps_sets_the_port_rate_and_only_for_traces(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_text(SMALL)
    cli = [sys.executable, "-m", "grouper.cli", "simulate", "--policies", "fs"]
    out = tmp_path / "out"
    got = subprocess.run(
        [*cli, "--workload", f"coflow:{path}", "--link-gbps", "8", "--out", str(out),
         "--json", "-"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    import json

    fs = json.loads(got.stdout)["results"]["fs"]
    # 8 Gbit/s = 1e9 B/s: coflow 1 takes 4 MB / 1e9 s, coflow 2 1 MB / 1e9 s
    assert fs["avg_sct"] == pytest.approx((4 * MB / 1e9 + MB / 1e9) / 2)
    bad = subprocess.run(
        [*cli, "--workload", "builtin:fig3", "--link-gbps", "8"], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == "grouper: error: --link-gbps: only with --workload coflow:PATH"


def test_bench_simulator_reports_every_policy(tmp_path: Path) -> None:
    """Run from another directory than the checkout, as a user would: each run's child
    interpreter imports the installed package, not the checkout's folders."""
    import json

    path = tmp_path / "t.txt"
    path.write_text(SMALL)
    got = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "bench", "simulator", "--trace", str(path),
         "--policies", "fs,grouper", "--fractions", "0.5,1", "--json", "-"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    out = json.loads(got.stdout)
    assert set(out["policies"]) == {"fs", "grouper"}
    for r in out["policies"].values():
        assert r["seconds"] > r["run_seconds"] > 0 and r["peak_mb"] > 10  # whole child
        assert r["events"] >= 2 and r["engine"] == "FastEngine"
        assert r["events_per_second"] == r["events"] / r["seconds"]  # the same seconds
        assert 0 <= r["fallbacks"] <= r["allocations"] and r["allocations"] > 0
    assert [g["coflows"] for g in out["growth"]] == [1, 2]
    assert out["policies"]["fs"]["avg_cct_vs_fs"] == 1.0


def test_warm_up_runs_both_coflow_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make setup`` compiles the fast paths with ``run.warm_up``: its tiny trace has to
    go through both coflow engines (the contention penalty's too), or the first trace
    simulated after an install compiles them (about 40 s)."""
    from grouper.simulator import run

    seen: list[str] = []
    real = run.engine_for

    def spy(*args: object, **kwargs: object) -> object:
        engine = real(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(type(engine).__name__)
        return engine

    monkeypatch.setattr(run, "engine_for", spy)
    run.warm_up()
    assert seen == ["FastEngine", "FlowFastEngine"]
