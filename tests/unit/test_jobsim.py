"""Job-level simulation (``simulate --mode jobs``): Wang et al.'s placement and
all-reduce scheduling, checked by hand and against Theorems 1-2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.cli.main import main
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.pda.admission import two_task_average
from grouper.simulator.jobs.engine import Job, Simulation
from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.run import run_jobs
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.workloads.jobmix import parse_jobmix, wang_64gpu
from grouper.workloads.placement import first_fit, least_loaded, lwf_kappa

MODEL = ContentionModel(a=0.0, b=1e-9, eta=5e-10)  # threshold b / (2 (b + eta)) = 1/3


def mix_doc(jobs: list[dict], servers: int = 2, per_server: int = 1) -> dict:
    return {
        "kind": "jobs",
        "name": "hand",
        "cluster": {"servers": servers, "gpus_per_server": per_server, "gpu_memory_mb": 16000},
        "contention": {"a": MODEL.a, "b": MODEL.b, "eta": MODEL.eta},
        "models": {
            "big": {"size_mb": 1000, "memory_mb": 1000, "t_f": 0.1, "t_b": 0.1},
            "small": {"size_mb": 100, "memory_mb": 1000, "t_f": 0.1, "t_b": 0.1},
            "mid": {"size_mb": 500, "memory_mb": 1000, "t_f": 0.1, "t_b": 0.1},
        },
        "jobs": jobs,
    }


def ends(doc: dict, scheduler: str, placement: str = "lwf:1") -> list[float]:
    r = run_jobs(parse_jobmix(doc), parse_placement(placement), parse_scheduler(scheduler))
    return [row["end"] for row in r.jobs]


# --- placement ------------------------------------------------------------------------

LOAD = np.array([5.0, 0.0, 1.0, 1.0, 0.0, 9.0])  # 3 servers x 2 GPUs


def test_lwf_small_jobs_take_the_least_loaded_gpus_anywhere():
    free = np.ones(6, dtype=bool)
    assert lwf_kappa(1, 1, LOAD, free, 2).tolist() == [1]
    assert lwf_kappa(2, 2, LOAD, free, 2).tolist() == [1, 4]  # as LS: two servers


def test_lwf_large_jobs_fill_the_least_loaded_servers_first():
    free = np.ones(6, dtype=bool)
    # server loads 5, 2, 9: server 1 first, then server 0 by GPU load
    assert lwf_kappa(2, 1, LOAD, free, 2).tolist() == [2, 3]
    assert lwf_kappa(3, 1, LOAD, free, 2).tolist() == [2, 3, 1]
    free[3] = False
    assert lwf_kappa(2, 1, LOAD, free, 2).tolist() == [2, 1]
    assert lwf_kappa(6, 1, LOAD, free, 2) is None


def test_ls_and_ff_by_hand():
    free = np.ones(6, dtype=bool)
    assert least_loaded(2, LOAD, free).tolist() == [1, 4]
    free[0] = False
    assert first_fit(2, free).tolist() == [1, 2]
    assert first_fit(6, free) is None


# --- the engine ------------------------------------------------------------------------


def test_one_server_job_runs_compute_only():
    doc = mix_doc([{"gpus": 2, "iterations": 3, "model": "big"}], servers=1, per_server=2)
    assert ends(doc, "srsf:1") == pytest.approx([0.6])


def test_two_server_job_adds_its_all_reduce_per_iteration():
    doc = mix_doc([{"gpus": 2, "iterations": 3, "model": "big"}])
    assert ends(doc, "srsf:1") == pytest.approx([3 * (0.2 + 1.0)])


# A (1 GB) computes on [0, 0.2] and all-reduces from 0.2 (1 s alone). B (100 MB) arrives
# at 0.3, computes on [0.3, 0.5]; at 0.5, A has 0.7 GB left: 0.1 / 0.7 < 1/3.
SHARE = [
    {"arrival": 0, "gpus": 2, "iterations": 1, "model": "big"},
    {"arrival": 0.3, "gpus": 2, "iterations": 1, "model": "small"},
]


def test_ada_srsf_shares_when_theorem_2_says_so_and_times_follow_eq_5():
    a_end, b_end = ends(mix_doc(SHARE), "ada-srsf")
    first, second = two_task_average(0.7e9, 1e8, 0.0, MODEL)
    assert (a_end, b_end) == pytest.approx((0.5 + first, 0.5 + second))
    assert (a_end, b_end) == pytest.approx((1.35, 0.75))


def test_srsf_1_makes_the_small_all_reduce_wait():
    assert ends(mix_doc(SHARE), "srsf:1") == pytest.approx([1.2, 1.3])
    # Theorem 2's choice is the better average here
    assert sum(ends(mix_doc(SHARE), "ada-srsf")) < sum(ends(mix_doc(SHARE), "srsf:1"))


def test_ada_srsf_waits_when_sharing_would_not_pay_but_srsf_2_shares():
    doc = mix_doc([SHARE[0], {**SHARE[1], "model": "mid"}])  # 0.5 / 0.7 > 1/3
    assert ends(doc, "ada-srsf") == pytest.approx(ends(doc, "srsf:1"))
    assert ends(doc, "srsf:1") == pytest.approx([1.2, 1.7])
    # SRSF(2) shares blindly: B's 0.5 GB at 1 / (2b + eta) = 1.25 s, A's rest after
    assert ends(doc, "srsf:2") == pytest.approx([0.5 + 1.25 + 0.2, 1.75])


def test_ada_srsf_never_joins_two_running_all_reduces():
    doc = mix_doc(SHARE + [{"arrival": 0.45, "gpus": 2, "iterations": 1, "model": "tiny"}])
    doc["models"]["tiny"] = {"size_mb": 1, "memory_mb": 1000, "t_f": 0.01, "t_b": 0.01}
    # C (1 MB) is ready at 0.52 while A and B share; 1 MB is far below a third of
    # either, yet it waits for B to end (0.75), then joins A alone (0.6 GB left)
    assert ends(doc, "ada-srsf") == pytest.approx([0.7525 + 0.599, 0.75, 0.7525])
    assert ends(doc, "srsf:3")[2] < 0.75


def test_an_all_reduce_moves_at_the_rate_of_its_busiest_server():
    doc = mix_doc([{"gpus": 1, "iterations": 1, "model": "big"}], servers=3)
    sim = Simulation(parse_jobmix(doc), parse_placement("ff"), parse_scheduler("srsf:3"))
    a, b = (Job(sim.mix.jobs[0], 1, 0.0, MODEL.b) for _ in range(2))
    a.id, b.id, a.servers, b.servers = 0, 1, [0, 1], [1, 2]
    sim.jobs = [a, b]
    sim.server_comm = [{a}, {a, b}, {b}]
    a.comm_left = b.comm_left = 1e9
    sim.rerate([0, 1, 2])
    assert a.rate == b.rate == pytest.approx(1 / (2 * MODEL.b + MODEL.eta))


def test_jobs_wait_for_gpu_memory():
    doc = mix_doc([{"gpus": 1, "iterations": 1, "model": "big"}] * 3, servers=1)
    doc["cluster"]["gpu_memory_mb"] = 2000  # two jobs fit on the GPU
    r = run_jobs(parse_jobmix(doc), parse_placement("ff"), parse_scheduler("srsf:1"))
    assert [row["placed"] for row in r.jobs] == pytest.approx([0, 0, 0.2])
    assert [row["end"] for row in r.jobs] == pytest.approx([0.2, 0.4, 0.6])


def test_wang_mix_follows_the_papers_gpu_counts():
    mix = wang_64gpu(seed=3)
    counts = {g: sum(j.gpus == g for j in mix.jobs) for g in (1, 2, 4, 8, 16, 32)}
    assert counts == {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}
    assert all(1000 <= j.iterations <= 6000 for j in mix.jobs)
    assert mix.cluster.gpus == 64


# --- input -----------------------------------------------------------------------------


@pytest.mark.parametrize("spec", ["lwf", "lwf:0", "lwf:x", "ff:2", "best", ""])
def test_bad_placements_are_refused(spec):
    with pytest.raises(ConfigError, match="--placement"):
        parse_placement(spec)


@pytest.mark.parametrize("spec", ["srsf", "srsf:0", "ada", "srsf:1:2"])
def test_bad_schedulers_are_refused(spec):
    with pytest.raises(ConfigError, match="--scheduler"):
        parse_scheduler(spec)


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda d: d["jobs"][0].update(gpus=3), "jobs[0].gpus"),
        (lambda d: d["jobs"][0].update(model="gpt"), "jobs[0].model"),
        (lambda d: d["jobs"][0].update(iterations=0), "jobs[0].iterations"),
        (lambda d: d["cluster"].update(servers=0), "cluster.servers"),
        (lambda d: d["models"]["big"].update(memory_mb=1e6), "jobs[0].model"),
        (lambda d: d.update(kind="stages"), "kind"),
        (lambda d: d.update(extra=1), "extra"),
    ],
)
def test_bad_job_mixes_name_the_field(change, path):
    doc = mix_doc([{"gpus": 2, "iterations": 3, "model": "big"}])
    change(doc)
    with pytest.raises(ConfigError) as err:
        parse_jobmix(doc)
    assert err.value.path == path


VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(allow_nan=True),
    st.text(max_size=5), st.lists(st.integers(0, 3), max_size=2),
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["servers", "gpus_per_server", "gpu_memory_mb"]),
    st.sampled_from(["gpus", "iterations", "arrival", "model"]),
    VALUES,
    VALUES,
)
def test_any_bad_value_is_a_config_error(ckey, jkey, cval, jval):
    doc = mix_doc([{"gpus": 2, "iterations": 3, "model": "big"}])
    doc["cluster"][ckey] = cval
    doc["jobs"][0][jkey] = jval
    try:
        parse_jobmix(doc)
    except ConfigError as exc:
        assert str(exc).count("\n") == 0


def test_cli_runs_every_pair_and_writes_files(tmp_path, capsys):
    import yaml

    wl = tmp_path / "mix.yaml"
    wl.write_text(yaml.safe_dump(mix_doc(SHARE)))
    out = tmp_path / "res.json"
    code = main(
        ["simulate", "--mode", "jobs", "--workload", str(wl), "--placement", "lwf:1,ff",
         "--scheduler", "srsf:1,ada-srsf", "--json", str(out), "--out", str(tmp_path / "o")]
    )  # fmt: skip
    assert code == 0
    res = json.loads(out.read_text())
    assert set(res["results"]) == {"lwf:1/srsf:1", "lwf:1/ada-srsf", "ff/srsf:1", "ff/ada-srsf"}
    assert res["results"]["lwf:1/ada-srsf"]["avg_jct"] == pytest.approx((1.35 + 0.45) / 2)
    for f in res["files"]:
        assert (tmp_path / "o").as_posix() in f
    assert "avg JCT" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--mode", "jobs", "--placement", "best"], "--placement"),
        (["--placement", "ff"], "--placement"),
        (["--mode", "jobs", "--scheduler", "srsf:1,srsf:1"], "--scheduler"),
        (["--mode", "jobs", "--workload", "builtin:sim60"], "workload"),
    ],
)
def test_cli_bad_arguments_exit_2_naming_the_field(argv, field, capsys):
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and field in err


def test_held_gpus_stay_idle_through_the_all_reduce():
    two = [
        {"arrival": 0, "gpus": 2, "iterations": 1, "model": "big"},
        {"arrival": 0.1, "gpus": 2, "iterations": 1, "model": "small"},
    ]
    # shared GPUs: B computes while A all-reduces, then waits for the link (SRSF(1))
    assert ends(mix_doc(two), "srsf:1") == pytest.approx([1.2, 1.3])
    held = {**mix_doc(two), "hold_gpus": True}
    assert ends(held, "srsf:1") == pytest.approx([1.2, 1.5])


def test_held_gpus_do_not_deadlock_on_crossed_placements():
    jobs = [{"arrival": 0.01 * i, "gpus": 2, "iterations": 3, "model": "small"} for i in range(6)]
    doc = {**mix_doc(jobs, servers=3, per_server=1), "hold_gpus": True}
    r = run_jobs(parse_jobmix(doc), parse_placement("rand"), parse_scheduler("ada-srsf"))
    assert all(np.isfinite(row["end"]) for row in r.jobs)
