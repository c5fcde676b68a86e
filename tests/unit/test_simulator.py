"""Simulator: the paper's Fig. 3 numbers, byte conservation, topologies, workloads."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.simulator.engine import Engine
from grouper.simulator.run import run_policies
from grouper.workloads import load_workload
from grouper.workloads.generators import halving_runs
from grouper.workloads.generators import testbed as make_testbed
from grouper.workloads.placement import Placer
from grouper.workloads.topology import bigswitch, leafspine, parse_topology


def test_fig3_policies_match_the_paper():
    runs = run_policies(load_workload("builtin:fig3"), ["fs", "sptf", "grouper"], progress=False)
    assert {p: r.summary["avg_sct"] for p, r in runs.items()} == pytest.approx(
        {"fs": 8.0, "sptf": 7.5, "grouper": 6.5}
    )


def test_simulate_cli_fig3_json(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "grouper.cli",
            "simulate",
            "--workload",
            "builtin:fig3",
            "--policies",
            "fs,sptf,grouper",
            "--out",
            str(tmp_path),
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    res = json.loads(out)
    assert {p: r["avg_sct"] for p, r in res["results"].items()} == pytest.approx(
        {"fs": 8.0, "sptf": 7.5, "grouper": 6.5}
    )
    assert res["lp_lower_bound_avg_sct"] == pytest.approx(6.5)
    assert res["results"]["grouper"]["ratio_to_lp_bound"] == pytest.approx(1.0)
    for name in ("stages.csv", "jobs.csv", "slowdown_cdf.png", "normalized.png"):
        assert (tmp_path / name).stat().st_size > 0


@pytest.mark.parametrize(
    "policy",
    [
        "fs",
        "baraat",
        "sincronia",
        "sptf",
        "grouper",
        "grouper-offline",
        "grouper-noadmit",
        "grouper-infinite",
    ],
)
def test_every_byte_is_delivered(policy):
    wl = make_testbed(rounds=1, scale=0.005)
    runs = run_policies(wl, [policy], progress=False)
    r = runs[policy].result
    assert r.bytes_expected > 0
    assert r.bytes_delivered == pytest.approx(r.bytes_expected, rel=1e-6)
    assert len(r.stages) == 16  # 4 cojobs x 4 stages


def test_compute_gaps_and_iterations_timeline():
    # one job, 2 iterations of compute 1 + transfer 2 units at capacity 1
    cj = Cojob("c", (2,), (Job.explicit("j", [FlowSpec("a", "b", 2.0)], compute_time=1.0),))
    r = Engine([cj], bigswitch(["a", "b"], 1.0), "fs").run()
    assert r.stages[0]["end"] == pytest.approx(6.0)


def test_leafspine_paths_and_deterministic_spines():
    t = leafspine(2, 3, 2, 1.0, seed=5)
    assert t.path(0, 1) == [0, 4 + 1]  # same leaf: up, down
    p = t.path(0, 3, "k")
    assert len(p) == 4 and p[0] == 0 and p[-1] == 4 + 3
    assert p == t.path(0, 3, "k")
    spines = {t.path(0, 3, f"k{i}")[1] for i in range(40)}
    assert len(spines) == 3, "flows spread over every spine"
    assert t.capacity[0] == pytest.approx(1e9 / 8)
    assert parse_topology("leafspine:3,3,8,1,23").hosts[-1] == "h23"


def test_successive_halving_8_4_2_1():
    runs = halving_runs(8, 4, np.random.default_rng(3))
    assert sorted(Counter(runs).items()) == [(1, 4), (2, 2), (3, 1), (4, 1)]


def test_lwf_consolidates_large_jobs_and_small_ones_take_least_loaded_gpus():
    p = Placer(10, 4, "lwf:2")
    big = p.place(8, 5.0)
    assert len(set(big)) == 2, "8 participants consolidated on 2 servers of 4 GPUs"
    small = p.place(2, 1.0)  # like list scheduling: the least loaded GPUs
    assert not set(small) & set(big)
    assert len(set(Placer(10, 4, "random", 1).place(4, 1.0))) == 4


def test_testbed_relaunches_a_model_after_its_third_stage():
    wl = make_testbed(rounds=2, scale=0.005)
    r = run_policies(wl, ["fs"], progress=False)["fs"].result
    end3 = {s["cojob"]: s["end"] for s in r.stages if s["stage"] == 3}
    start = {s["cojob"]: s["start"] for s in r.stages if s["stage"] == 1}
    for model in ("DeepSpeech2", "ResNet152", "AlexNet", "VGG19"):
        assert start[f"{model}-r2"] == pytest.approx(end3[f"{model}-r1"])


def test_sweep_writes_its_plot_and_json(tmp_path):
    out = tmp_path / "nested" / "sweep"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "grouper.cli",
            "simulate",
            "sweep",
            "--what",
            "period",
            "--workload",
            "builtin:fig3",
            "--values",
            "0,1",
            "--policies",
            "grouper",
            "--out",
            str(out),
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    res = json.loads(proc.stdout)
    # normalized = the policy's average SCT over fair sharing's at the same point
    points = res["points"]
    for p in ("fs", "grouper"):
        want = [pt["results"][p]["avg_sct"] / pt["results"]["fs"]["avg_sct"] for pt in points]
        assert res["normalized_avg_sct"][p] == pytest.approx(want)
    # fig3 (paper, Fig. 3): fair sharing 8, grouper 6.5 whatever the period
    assert [pt["results"]["fs"]["avg_sct"] for pt in res["points"]] == [8.0, 8.0]
    assert res["normalized_avg_sct"]["grouper"] == pytest.approx([6.5 / 8, 6.5 / 8])
    assert (out / "period.png").stat().st_size > 0


def test_the_engine_serves_the_first_hop_by_band_and_later_hops_by_dscp_queue():
    """h1 sends job A to h2 and job B to h3 on a big switch. A has NIC band 1 but
    receiver band 5, B NIC band 2 but receiver band 1: h1's NIC (the only shared link)
    serves A first, so A gets the whole link and B nothing."""
    jobs = [
        Cojob(c, (1,), (Job.explicit("j", [FlowSpec("h1", d, 10.0)]),))
        for c, d in (("A", "h2"), ("B", "h3"))
    ]
    eng = Engine(jobs, bigswitch(["h1", "h2", "h3"], 10.0), "grouper")
    for j, (band, rband) in zip(eng.jobs, [(1, 5), (2, 1)], strict=True):
        eng._start_comm(j)
        j.band[:], j.rband[:] = band, rband
    rates, _ = eng._rates(eng._active_flows())
    assert rates == pytest.approx([10.0, 0.0])


@pytest.mark.parametrize(("mode", "sct"), [("sequential", 16.0), ("overlap", 8.0)])
def test_ps_mode_sequential_pushes_then_pulls_overlap_does_both(mode, sct):
    """2 workers, 1 server, 2 bytes per worker and direction, unit links: a push phase
    loads the server's downlink with 4 (4 s), a pull phase its uplink (4 s); two
    iterations take 16 s in sequence, 8 s when push and pull overlap."""
    from grouper.workloads import parse_workload

    wl = parse_workload(
        {
            "hosts": ["h1", "h2", "h3"],
            "model": {"ps_mode": mode, "contention": "none"},
            "cojobs": [
                {
                    "id": "a",
                    "stages": [2],
                    "jobs": [
                        {
                            "id": "j",
                            "arch": "ps",
                            "model_bytes": 2,
                            "workers": ["h1", "h2"],
                            "servers": ["h3"],
                        }  # fmt: skip
                    ],
                }
            ],
        }
    )
    r = run_policies(wl, ["fs"], progress=False)["fs"]
    assert r.summary["avg_sct"] == pytest.approx(sct)


@pytest.mark.parametrize(("steps", "ring_end"), [(False, 3.0), (True, 4.0)])
def test_a_ring_in_steps_waits_for_its_slowest_hop_at_every_step(steps, ring_end):
    """A ring of h1, h2 (model 2: each hop moves 2 per iteration; in steps, 1 in each of
    2 steps) on unit links. X (h1 -> h3, 1) runs from 0 and Y (h2 -> h3, 1) from 2, so
    contention moves from hop h1 -> h2 to hop h2 -> h1. Fluid: h2 -> h1 is done at 2
    and h1 -> h2 at 3 (half rate to 2, then alone). Steps: step 1 ends at 2 (h1 -> h2
    at half rate), step 2 at 4 (h2 -> h1 shares with Y)."""
    jobs = [
        Cojob("ring", (1,), (Job.ring("r", 2.0, ["h1", "h2"]),)),
        Cojob("x", (1,), (Job.explicit("x", [FlowSpec("h1", "h3", 1.0)]),)),
        Cojob("y", (1,), (Job.explicit("y", [FlowSpec("h2", "h3", 1.0)]),), arrival=2.0),
    ]
    eng = Engine(jobs, bigswitch(["h1", "h2", "h3"], 1.0), "fs", ring_steps=steps)
    ends = {s["cojob"]: s["sct"] for s in eng.run().stages}
    assert ends["ring"] == pytest.approx(ring_end)
    assert ends["x"] == pytest.approx(2.0)


def test_sweep_points_in_parallel_give_the_same_results(tmp_path):
    def sweep(jobs: int) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "grouper.cli", "simulate", "sweep", "--what", "period",
             "--workload", "builtin:fig3", "--values", "0,0.5,1,2", "--policies", "grouper",
             "--jobs", str(jobs), "--out", str(tmp_path / str(jobs)), "--json", "-"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return json.loads(proc.stdout)

    one, two = sweep(1), sweep(2)
    assert one["points"] == two["points"]
    assert [p["period"] for p in one["points"]] == [0.0, 0.5, 1.0, 2.0]
    assert set(one["points"][0]["results"]) == {"fs", "grouper"}, "fs always runs (the base)"


@pytest.mark.parametrize(("mode", "sct"), [("drop", 2.0), ("ports", 6.0)])
def test_host_local_traffic_is_dropped_or_charged_to_the_hosts_ports(mode, sct):
    """One iteration: h1 sends 2 units to h2 and 4 to itself over unit links. Dropped,
    the local flow costs nothing: 2 s. On the host's ports both flows share h1's uplink
    at 1/2 each: the remote one ends at 4 s with 2 of the local one done, whose last 2
    take 2 s alone: 6 s."""
    from grouper.workloads import parse_workload

    wl = parse_workload(
        {
            "hosts": ["h1", "h2"],
            "model": {"local_traffic": mode, "contention": "none"},
            "cojobs": [
                {
                    "id": "a",
                    "stages": [1],
                    "jobs": [
                        {
                            "id": "j",
                            "arch": "flows",
                            "flows": [
                                {"src": "h1", "dst": "h2", "bytes": 2},
                                {"src": "h1", "dst": "h1", "bytes": 4},
                            ],
                        }  # fmt: skip
                    ],
                }
            ],
        }
    )
    r = run_policies(wl, ["fs"], progress=False)["fs"]
    assert r.summary["avg_sct"] == pytest.approx(sct)
    assert r.result.bytes_delivered == pytest.approx(r.result.bytes_expected)


def test_a_jobs_weight_reaches_the_simulated_plans():
    """Two one-stage rings on one link, b's larger: by size grouper runs a first; with
    weight 4 on b's job it runs b first (the planner the coordinator uses gets the
    weight from the simulator too)."""
    from grouper.workloads import parse_workload

    def ends(weight: float) -> dict[str, float]:
        wl = parse_workload(
            {
                "hosts": ["h1", "h2"],
                "model": {"contention": "none"},
                "cojobs": [
                    {"id": "a", "stages": [2], "jobs": [
                        {"id": "j", "arch": "ring", "model_bytes": 2, "workers": ["h1", "h2"]}]},
                    {"id": "b", "stages": [2], "jobs": [
                        {"id": "k", "arch": "ring", "model_bytes": 3, "workers": ["h1", "h2"],
                         "weight": weight}]},
                ],
            }
        )  # fmt: skip
        r = run_policies(wl, ["grouper"], progress=False)["grouper"].result
        return {s["cojob"]: s["end"] for s in r.stages}

    assert ends(1.0) == {"a": pytest.approx(4.0), "b": pytest.approx(10.0)}
    assert ends(4.0) == {"a": pytest.approx(10.0), "b": pytest.approx(6.0)}


def test_flows_that_ended_count_in_the_next_allocation_only_after_an_event_where_they_moved():
    """A flow that ends keeps its last rate in the next allocation's starting use (its
    queue-mates take the capacity back first); after an event where nothing moved (a
    compute gap) no flow ended at the last event, so none is passed on."""
    job = Job.explicit("j", [FlowSpec("a", "c", 1.0), FlowSpec("a", "b", 2.0)], compute_time=1.0)
    e = Engine([Cojob("c", (3,), (job,))], bigswitch(list("abc"), 1.0), "fs")
    passed, steps = [], []
    rates = e._rates

    def spy(active: np.ndarray) -> np.ndarray:
        passed.append(e.ended.tolist())
        return rates(active)

    advance = e._advance_time

    def step(pending: list[int], nxt: float) -> float:
        moving = len(e._active_flows()) > 0
        dt = advance(pending, nxt)
        steps.append((moving, e.ended.tolist()))
        return dt

    e._rates, e._advance_time = spy, step  # type: ignore[method-assign]
    e.run()
    idle = [ended for moving, ended in steps if not moving]
    assert idle and all(ended == [] for ended in idle)  # compute gaps: nothing ended
    assert any(p for p in passed)  # flows that ended were passed on where they moved
