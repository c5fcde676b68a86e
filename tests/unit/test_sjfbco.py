"""SJF-BCO (Yu et al. 2022): FA-FFP and LBSGF by hand, FA-FFP's two orders of
fragments (the planner's and the stage-level ``sjf-bco`` placement's), the bisection's
bound feasible and tight, and the plan's execution under contention."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grouper.cli.main import main
from grouper.common.errors import ConfigError
from grouper.simulator.jobs.rar_engine import execute, run_rar
from grouper.simulator.jobs.sjfbco import Plan, Planner, parse_rar_policy
from grouper.workloads.placement import Placer, SjfBco
from grouper.workloads.rarmix import RarJob, RarMix, parse_rarmix, yu_rar


def planner(caps: tuple[int, ...], policy: str = "sjf-bco", lam: float = 1.0) -> Planner:
    mix = RarMix("hand", caps, (RarJob(0, 1, 10, 1.0, 0.1),), lam)
    return Planner(mix, parse_rar_policy(policy))


def job(gpus: int) -> RarJob:
    return RarJob(0, gpus, 10, 1.0, 0.1)


def test_fa_ffp_fills_fragments_of_servers_in_use_first():
    p = planner((2, 2))
    U = np.array([5.0, 0.0, 0.0, 0.0])  # server 0 is in use, GPU 1 is a fragment
    ok = np.ones(4, dtype=bool)
    assert p.fa_ffp(job(1), U, ok).tolist() == [1]
    assert p.fa_ffp(job(2), U, ok).tolist() == [1, 2]


def test_lbsgf_takes_the_least_busy_servers_that_hold_lambda_g_gpus():
    U = np.array([3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])  # averages 3, 0, 1
    ok = np.ones(8, dtype=bool)
    assert planner((2, 2, 4)).lbsgf(job(2), U, ok).tolist() == [2, 3]
    assert planner((2, 2, 4)).lbsgf(job(3), U, ok).tolist() == [2, 3, 4]
    ok[3] = False  # lambda = 1 allows server 1 only: not enough GPUs there
    assert planner((2, 2, 4)).lbsgf(job(2), U, ok) is None
    assert planner((2, 2, 4), lam=2.0).lbsgf(job(2), U, ok).tolist() == [2, 4]


def test_fa_ffp_orders_fragments_by_gpu_for_the_planner_and_by_server_for_placement():
    busy = np.array([4.0, 0.0, 1.0, 1.0, 0.0, 0.0])  # servers 0, 1 in use, averages 2, 1
    opened, server_busy = np.array([True, True, False]), np.array([2.0, 1.0, 0.0])
    every = np.arange(6)
    by_gpu, by_server = SjfBco((2, 2, 2)), SjfBco((2, 2, 2), fragments="by-server")
    assert by_gpu.fa_ffp(3, busy, every, opened).tolist() == [1, 2, 3]
    assert by_server.fa_ffp(3, busy, every, opened, server_busy).tolist() == [2, 3, 1]
    assert by_server.fa_ffp(5, busy, every, opened, server_busy).tolist() == [2, 3, 1, 0, 4]
    assert by_gpu.fa_ffp(7, busy, every, opened) is None
    with pytest.raises(ValueError, match="fragments"):
        SjfBco((2,), fragments="by-slot")


def test_sjf_bco_placement_packs_small_jobs_into_servers_in_use():
    p = Placer(3, 2, "sjf-bco:2")
    assert p.place(4, 1.0) == [0, 0, 1, 1]  # large: LBSGF, least busy servers one by one
    assert p.place(1, 5.0) == [0]  # small: FA-FFP, server 0 is in use (averages tie)
    assert p.place(2, 1.0) == [1, 1]  # server 1 is now the least busy one in use
    assert p.place(3, 1.0) == [2, 2, 1]  # large: the unused server first
    assert Placer(1, 2, "sjf-bco").place(5, 1.0) == [0] * 5  # more participants than slots


def no_overlap(plan: Plan, rho: list[float]) -> bool:
    busy: dict[int, list[tuple[float, float]]] = {}
    for i, gpus in enumerate(plan.gpus):
        for g in gpus.tolist():
            busy.setdefault(g, []).append((plan.start[i], plan.start[i] + rho[i]))
    for spans in busy.values():
        spans.sort()
        if any(b[0] < a[1] - 1e-9 for a, b in zip(spans, spans[1:], strict=False)):
            return False
    return True


@pytest.mark.parametrize("policy", ["sjf-bco", "sjf-bco:k=1", "ff", "ls"])
def test_bisection_bound_is_feasible_and_tight(policy):
    mix = yu_rar(seed=4, servers=4, jobs=16)
    p = Planner(mix, parse_rar_policy(policy))
    plan = p.plan()
    servers = [len(np.unique(p.server_of[g])) for g in plan.gpus]
    rho = [p.rho(j, s) for j, s in zip(mix.jobs, servers, strict=True)]
    ends = [plan.start[i] + rho[i] for i in range(len(rho))]
    assert max(ends) == pytest.approx(plan.est_makespan)
    assert plan.est_makespan <= plan.theta  # feasible: no GPU busy past the bound
    assert no_overlap(plan, rho)
    assert all(len(g) == j.gpus for g, j in zip(plan.gpus, mix.jobs, strict=True))
    # tight: one time unit less does not fit (the bound is an integer)
    pick = {"ff": p.first_fit, "ls": p.least}.get(policy) or p.pick_for(plan.kappa)
    smaller = p.once(plan.theta - 1, pick)
    assert smaller is None or smaller.est_makespan > plan.est_makespan


def test_sjf_bco_orders_jobs_smallest_first():
    mix = yu_rar(seed=2, servers=3, jobs=10)
    p = Planner(mix, parse_rar_policy("sjf-bco"))
    sizes = [mix.jobs[i].gpus for i in p.order]
    assert sizes == sorted(sizes)


def test_execution_charges_contention_and_overhead():
    # A and B each span servers 0 and 1: p = 1 (each meets the other), s = 2
    jobs = (RarJob(0, 2, 10, 1.0, 0.1), RarJob(1, 2, 10, 1.0, 0.1))
    mix = RarMix("hand", (2, 2), jobs)
    plan = Plan([np.array([0, 2]), np.array([1, 3])], np.zeros(2), [0, 1], 100.0, None, 0.0)
    start, end = execute(mix, plan, np.array([0, 0, 1, 1]))
    assert end.tolist() == pytest.approx([13.0, 13.0])  # 10 x 1.0 x (1 + 0.1 + 0.2)
    # one server each: no contention, no overhead
    plan = Plan([np.array([0, 1]), np.array([2, 3])], np.zeros(2), [0, 1], 100.0, None, 0.0)
    assert execute(mix, plan, np.array([0, 0, 1, 1]))[1].tolist() == pytest.approx([10, 10])


def test_execution_keeps_each_gpus_planned_order():
    jobs = (RarJob(0, 1, 10, 1.0, 0.1), RarJob(1, 2, 5, 1.0, 0.1))
    mix = RarMix("hand", (2,), jobs)
    plan = Plan([np.array([0]), np.array([0, 1])], np.array([0.0, 10.0]), [0, 1], 20.0, None, 0)
    start, end = execute(mix, plan, np.array([0, 0]))
    assert start.tolist() == [0.0, 10.0] and end.tolist() == pytest.approx([10.0, 15.0])


def test_searching_kappa_is_never_worse_than_any_fixed_kappa():
    mix = yu_rar(seed=3, servers=6, jobs=30)
    searched = Planner(mix, parse_rar_policy("sjf-bco")).plan().est_makespan
    for k in (1, 2, 4, 8):
        fixed = Planner(mix, parse_rar_policy(f"sjf-bco:k={k}")).plan().est_makespan
        assert searched <= fixed


def test_sjf_bco_beats_the_baselines_makespan_on_the_builtin():
    runs = {p: run_rar(yu_rar(seed=1), parse_rar_policy(p))[0] for p in ("sjf-bco", "ff", "rand")}
    assert runs["sjf-bco"].summary["makespan"] < runs["ff"].summary["makespan"]
    assert runs["sjf-bco"].summary["makespan"] < runs["rand"].summary["makespan"]


@pytest.mark.parametrize("spec", ["sjf", "sjf-bco:k=0", "sjf-bco:l=0.5", "ff:k=1", "sjf-bco:x"])
def test_bad_policies_are_refused(spec):
    with pytest.raises(ConfigError, match="--placement"):
        parse_rar_policy(spec)


@pytest.mark.parametrize(
    ("doc", "path"),
    [
        ({"kind": "rar-jobs", "servers": [], "jobs": [{}]}, "servers"),
        ({"kind": "rar-jobs", "servers": [2], "jobs": [{"gpus": 3, "iterations": 1, "tau": 1}]},
         "jobs[0].gpus"),
        ({"kind": "rar-jobs", "servers": [2], "jobs": [{"gpus": 1, "iterations": 1, "tau": 0}]},
         "jobs[0].tau"),
        ({"kind": "rar-jobs", "servers": [2], "lambda": 0.5, "jobs": []}, "lambda"),
    ],
)  # fmt: skip
def test_bad_batches_name_the_field(doc, path):
    with pytest.raises(ConfigError) as err:
        parse_rarmix(doc)
    assert err.value.path == path


def test_cli_runs_yu_rar_file_and_refuses_a_scheduler(tmp_path, capsys):
    import yaml

    wl = tmp_path / "b.yaml"
    jobs = [{"gpus": g, "iterations": 100, "tau": 0.1, "xi": 0.05} for g in (1, 2, 4, 8, 1)]
    doc = {"kind": "rar-jobs", "servers": [4, 4], "jobs": jobs}
    wl.write_text(yaml.safe_dump(doc))
    out = tmp_path / "r.json"
    argv = ["simulate", "--mode", "jobs", "--workload", str(wl), "--out", str(tmp_path / "o")]
    assert main([*argv, "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["model"] == "yu"
    assert set(res["results"]) == {"sjf-bco/gang", "ff/gang", "ls/gang", "rand/gang"}
    assert main([*argv, "--scheduler", "srsf:1"]) == 2
    assert "--scheduler" in capsys.readouterr().err
