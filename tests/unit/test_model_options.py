"""Workload modelling options: per-job weights and the stage barrier switched off."""

from __future__ import annotations

import re

import pytest

from grouper.common.errors import ConfigError
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.policies import schedule
from grouper.pda.snapshot import build_snapshot
from grouper.simulator.run import run_policies
from grouper.workloads import parse_workload

HOSTS = ["h1", "h2", "h3", "h4"]


def _pair(weight_b: float) -> list[Cojob]:
    """Two identical one-stage cojobs on the same link; b weighs ``weight_b``."""
    return [
        Cojob(c, (1,), (Job.explicit("j", [FlowSpec("h1", "h2", 4.0)], weight=w),))
        for c, w in (("a", 1.0), ("b", weight_b))
    ]


@pytest.mark.parametrize("policy", ["grouper", "sincronia", "sptf"])
def test_a_heavier_job_goes_first_and_equal_weights_keep_the_tie_rule(policy):
    for weight_b, first in ((1.0, "a"), (3.0, "b")):
        sched = schedule(build_snapshot(_pair(weight_b), HOSTS), policy)
        assert sched.ordered_ids()[0].startswith(first), (policy, weight_b)


def test_a_stage_weighs_as_its_heaviest_job():
    jobs = (
        Job.explicit("x", [FlowSpec("h1", "h2", 1.0)], weight=2.0),
        Job.explicit("y", [FlowSpec("h3", "h4", 1.0)], weight=5.0, stages=1),
    )
    snap = build_snapshot([Cojob("c", (1, 1), jobs)], HOSTS, known_survivors=False)
    # online: y is assumed to run both stages; offline it dies after the first
    assert snap.stage_weight.tolist() == [5.0, 5.0]
    offline = build_snapshot([Cojob("c", (1, 1), jobs)], HOSTS, known_survivors=True)
    assert offline.stage_weight.tolist() == [5.0, 2.0]
    assert offline.job_weight.tolist() == [2.0, 5.0]


def _workload(extra_job: dict | None = None, model: dict | None = None) -> dict:
    job_a = {"id": "a", "arch": "flows", "flows": [{"src": "h1", "dst": "h2", "bytes": 1}]}
    job_b = {"id": "b", "arch": "flows", "flows": [{"src": "h3", "dst": "h4", "bytes": 2}]}
    job_a.update(extra_job or {})
    return {
        "hosts": HOSTS,
        "time_unit": "unit",
        "model": model or {},
        "cojobs": [{"id": "c", "stages": [1, 1], "jobs": [job_a, job_b]}],
    }


@pytest.mark.parametrize(
    ("value", "problem"),
    [(0, "must be positive"), (-1, "must be positive"), ("x", "expected a number"),
     (1e7, "must be in (0, 1e+06]"), (float("nan"), "must be finite")],
)  # fmt: skip
def test_bad_weights_name_the_field(value, problem):
    with pytest.raises(ConfigError) as err:
        parse_workload(_workload({"weight": value}))
    assert str(err.value).startswith("cojobs[0].jobs[0].weight: " + problem)


def test_barrier_must_be_a_boolean():
    with pytest.raises(ConfigError, match=r"^model.barrier: expected true or false"):
        parse_workload(_workload(model={"barrier": "off"}))


def _run(**model: object) -> tuple[dict, dict]:
    wl = parse_workload(_workload(model=dict(model)))
    r = run_policies(wl, ["fs"], progress=False)["fs"].result
    return {s["stage"]: (s["start"], s["end"]) for s in r.stages}, {
        j["job"]: j["end"] for j in r.jobs
    }


def test_without_the_barrier_a_fast_job_moves_on_by_itself():
    """a (1 byte) and b (2 bytes) on separate unit links, two one-iteration stages.
    With the barrier a waits for b at t=2 and at t=4 (a job ends with its last stage);
    without it a runs stage 2 from t=1 to 2 and is done then."""
    stages, ends = _run()
    assert stages == {1: (0.0, 2.0), 2: (2.0, 4.0)}
    assert ends == pytest.approx({"a": 4.0, "b": 4.0})
    stages, ends = _run(barrier=False)
    assert stages == {1: (0.0, 2.0), 2: (1.0, 4.0)}
    assert ends == pytest.approx({"a": 2.0, "b": 4.0})


def test_without_the_barrier_the_snapshot_puts_each_job_in_its_own_stage():
    jobs = (
        Job.explicit("x", [FlowSpec("h1", "h2", 1.0)], done=1),
        Job.explicit("y", [FlowSpec("h3", "h4", 1.0)], done=0),
    )
    for barrier, want in ((True, [0, 0]), (False, [1, 0])):
        snap = build_snapshot([Cojob("c", (1, 1), jobs, barrier=barrier)], HOSTS)
        assert snap.job_stage.tolist() == want, barrier


@pytest.mark.parametrize("policy", ["fs", "grouper", "grouper-offline"])
def test_without_the_barrier_a_loser_ends_with_its_own_last_stage(policy):
    """a runs one stage only: without the barrier it is done at t=1, not at b's t=2;
    stage 2 then starts when b enters it. Every policy plans the jobs in their own
    stages (the planner path runs too)."""
    raw = _workload({"stages": 1}, model={"barrier": False})
    r = run_policies(parse_workload(raw), [policy], progress=False)[policy].result
    assert {j["job"]: j["end"] for j in r.jobs} == pytest.approx({"a": 1.0, "b": 4.0})
    assert {s["stage"]: (s["start"], s["end"]) for s in r.stages} == {
        1: (0.0, 2.0),
        2: (2.0, 4.0),
    }


def test_goodput_scales_every_transfer_and_bad_values_name_the_field():
    """Payload at half the link rate: b's 2 bytes take 4 time units, not 2."""
    stages, _ = _run(goodput=0.5)
    assert stages == {1: (0.0, 4.0), 2: (4.0, 8.0)}
    for bad, problem in ((0, "must be positive"), (1.5, "must be in (0, 1]")):
        with pytest.raises(ConfigError, match=rf"^model.goodput: {re.escape(problem)}"):
            parse_workload(_workload(model={"goodput": bad}))


def test_calibrated_goodput_is_one_over_b_at_the_host_link_rate():
    """Wang et al.'s 10 GbE constants (b = 8.53e-10 s/B) move 1.17 GB/s: 0.94 of
    1.25 GB/s; a b slower than the link's rate never gives more than the link."""
    from grouper.common.contention import ContentionModel
    from grouper.simulator.run import goodput_of
    from grouper.workloads.topology import bigswitch

    topo = bigswitch(["h1", "h2"], 1.25e9)
    assert goodput_of(ContentionModel(), topo) == pytest.approx(1 / (8.53e-10 * 1.25e9))
    assert goodput_of(ContentionModel(b=1e-10), topo) == 1.0
