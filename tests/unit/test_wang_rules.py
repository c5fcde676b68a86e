"""The paper's rule against the authors' code's, one hand case per difference, and the
reference poll (``simulate --mode jobs --rules ... --reference-poll``)."""

from __future__ import annotations

import json

import pytest

from grouper.cli.main import main
from grouper.common.errors import ConfigError
from grouper.simulator.jobs.engine import Simulation
from grouper.simulator.jobs.jobstate import COMM
from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.rules import Rules, parse_rules
from grouper.simulator.jobs.run import run_jobs
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.workloads.jobmix import parse_jobmix
from tests.unit.test_jobsim import SHARE, mix_doc

CODE = {"lwf-load": "lwf_load", "adadual-servers": "adadual_servers", "srsf-key": "srsf_key"}


def run(doc: dict, scheduler: str, rules: Rules, placement: str = "lwf:1") -> Simulation:
    sim = Simulation(parse_jobmix(doc), parse_placement(placement), parse_scheduler(scheduler),
                     1, rules)  # fmt: skip
    sim.run()
    return sim


def with_models(doc: dict, **models: dict) -> dict:
    return {**doc, "models": {**doc["models"], **models}}


def test_rules_parse_and_name():
    assert parse_rules(None) == Rules()
    assert parse_rules("code") == Rules("code", "code", "code", "code")
    assert parse_rules("srsf-key=code").srsf_key == "code"
    assert (
        parse_rules("code,tasks=paper", True).name == "lwf-load=code,adadual-servers=code,"
        "srsf-key=code+poll"
    )
    for bad in ("authors", "srsf-key=yes", "keys=code", "code,"):
        with pytest.raises(ConfigError):
            parse_rules(bad)


def test_srsf_key_code_leaves_the_all_reduce_out_of_the_order():
    # A: two servers, 10 x 0.2 s compute, 1 GB all-reduces (1 s each); B: one GPU,
    # 25 x 0.2 s. Paper key: A 10 x (0.2 + 1) x 2 = 24 > B 5: B has GPU 0 to itself and
    # ends at 5 s. Code key: A 4 < B 5, so A's worker goes first on GPU 0, and again
    # at 1.2 s (A 3.6 < B 4); at 2.4 s B's 3 beats A's 3.2 and B keeps it: 5.4 s.
    jobs = [{"arrival": 0, "gpus": 2, "iterations": 10, "model": "big"},
            {"arrival": 0, "gpus": 1, "iterations": 25, "model": "big"}]  # fmt: skip
    doc = mix_doc(jobs)
    assert run(doc, "srsf:1", Rules()).jobs[1].end == pytest.approx(5.0)
    assert run(doc, "srsf:1", Rules(srsf_key="code")).jobs[1].end == pytest.approx(5.4)


def test_tasks_code_lets_a_gpu_switch_jobs_between_forward_and_backward():
    # A (0.1 + 0.1 s) starts at 0; B (0.04 + 0.04 s) arrives at 0.05. One task: B waits
    # for A's backward (ends 0.28). Two tasks: B's passes run between A's (ends 0.18).
    doc = with_models(
        mix_doc(
            [
                {"arrival": 0, "gpus": 1, "iterations": 1, "model": "big"},
                {"arrival": 0.05, "gpus": 1, "iterations": 1, "model": "tiny"},
            ],
            servers=1,
        ),  # fmt: skip
        tiny={"size_mb": 1, "memory_mb": 1000, "t_f": 0.04, "t_b": 0.04},
    )
    one = run(doc, "srsf:1", Rules())
    two = run(doc, "srsf:1", Rules(tasks="code"))
    assert [j.end for j in one.jobs] == pytest.approx([0.2, 0.28])
    assert [j.end for j in two.jobs] == pytest.approx([0.28, 0.18])
    assert one.busy_time.sum() == pytest.approx(two.busy_time.sum())


def test_lwf_load_code_is_per_gpu_and_counts_the_all_reduce_estimate():
    # Y (1 GPU, 15 x 0.1 s) goes to GPU 0, X (2 GPUs, 10 x 0.1 s, 1 MB) to GPUs 1-2.
    # Paper loads: 1.5 | 2 | 2, so Z takes GPU 0. Code loads: X's per GPU,
    # 10 x (0.1 + 1 MB x 7.8125 ns) = 1.08 < 1.5, so Z takes GPU 1.
    doc = with_models(
        mix_doc(
            [
                {"arrival": 0, "gpus": 1, "iterations": 15, "model": "one"},
                {"arrival": 0, "gpus": 2, "iterations": 10, "model": "one"},
                {"arrival": 0.01, "gpus": 1, "iterations": 1, "model": "one"},
            ],
            servers=3,
        ),  # fmt: skip
        one={"size_mb": 1, "memory_mb": 1000, "t_f": 0.05, "t_b": 0.05},
    )
    paper = run(doc, "srsf:1", Rules())
    code = run(doc, "srsf:1", Rules(lwf_load="code"))
    assert [j.gpus for j in paper.jobs] == [[0], [1, 2], [0]]
    assert [j.gpus for j in code.jobs] == [[0], [1, 2], [1]]


def test_adadual_servers_code_checks_only_the_first_server_with_an_all_reduce():
    sim = Simulation(parse_jobmix(mix_doc(SHARE, servers=2)), parse_placement("ff"),
                     parse_scheduler("ada-srsf"), 1, Rules(adadual_servers="code"))  # fmt: skip
    new, small, large = sim.jobs[1], sim.jobs[0], Simulation(
        parse_jobmix(mix_doc(SHARE, servers=2)), parse_placement("ff"),
        parse_scheduler("ada-srsf")).jobs[0]  # fmt: skip
    for task, left in ((small, 1e8), (large, 1e10)):
        task.phase, task.comm_left, task.rate, task.stamp = COMM, left, 1e9, 0.0
    new.servers, new.server_order = [0, 1], [1, 0]  # placed on server 1 first
    sim.server_comm[0], sim.server_comm[1] = {small}, {large}
    admit = sim.scheduler.admit
    # 100 MB next to a 10 GB remainder passes Theorem 2, next to 100 MB it does not
    assert sim.remaining_bytes(new) == [1e10]
    assert admit(new.bytes, [1, 1], lambda: sim.remaining_bytes(new), sim.model)
    sim.rules = Rules()
    assert sorted(sim.remaining_bytes(new)) == [1e8, 1e10]
    assert not admit(new.bytes, [1, 1], lambda: sim.remaining_bytes(new), sim.model)


def test_under_the_code_check_a_new_all_reduce_can_admit_a_waiting_one():
    # new (100 MB) waits: the first of its servers with an all-reduce is server 1, whose
    # 100 MB remainder fails Theorem 2. Then 1 GB starts on server 0, now the first:
    # 100 MB / 1 GB passes, and the authors' loop (checking every slot) admits it.
    jobs = [{"arrival": 0, "gpus": 2, "iterations": 1, "model": m} for m in
            ("big", "small", "small")]  # fmt: skip
    sim = Simulation(parse_jobmix(mix_doc(jobs)), parse_placement("ff"),
                     parse_scheduler("ada-srsf"), 1, Rules(adadual_servers="code"))  # fmt: skip
    large, new, small = sim.jobs
    for j, servers in ((large, [0]), (new, [0, 1]), (small, [1])):
        j.servers = j.server_order = servers
    sim.start_comm(small)
    sim.comm_new = [new]
    sim.admit_comm()
    assert new in sim.comm_ready  # refused next to small
    sim.start_comm(large)
    sim.admit_comm()
    assert new not in sim.comm_ready and new.phase == COMM


# A (1 GB) all-reduces from 0.2 s at 1e9 B/s. B (500 MB) is ready at 0.5 s with 0.7 GB
# of A left: 0.5 / 0.7 > 1/3, so AdaDUAL makes B wait next to A, checking A every slot.
WAIT = [SHARE[0], {**SHARE[1], "model": "mid"}]


@pytest.mark.parametrize("rules", ["paper", "code"])
def test_the_reference_poll_moves_the_checked_all_reduce_one_slot_per_check(rules):
    mix = parse_jobmix(mix_doc(WAIT))
    r = run_jobs(mix, parse_placement("lwf:1"), parse_scheduler("ada-srsf"), 1,
                 parse_rules(rules, reference_poll=True))  # fmt: skip
    # A's last 0.7 GB: 1e9 B/s plus 1 ms of it per 1 ms check = 0.35 s; B then 0.5 s
    assert [row["end"] for row in r.jobs] == pytest.approx([0.85, 1.35], abs=2e-3)
    assert r.summary["reference_polls"] == pytest.approx(350, abs=2)


def test_without_checks_the_reference_poll_changes_nothing():
    mix = parse_jobmix(mix_doc(WAIT))
    for sched, want in (("srsf:1", [1.2, 1.7]), ("ada-srsf", [1.2, 1.7])):
        rules = Rules(reference_poll=sched == "srsf:1")  # SRSF counts tasks, never sizes
        r = run_jobs(mix, parse_placement("lwf:1"), parse_scheduler(sched), 1, rules)
        assert [row["end"] for row in r.jobs] == pytest.approx(want)
        assert r.summary.get("reference_polls", 0) == 0


def test_cli_takes_rules_and_the_poll_and_reports_them(tmp_path):
    import yaml

    wl = tmp_path / "mix.yaml"
    wl.write_text(yaml.safe_dump(mix_doc(WAIT)))
    out = tmp_path / "res.json"
    argv = ["simulate", "--mode", "jobs", "--workload", str(wl), "--scheduler", "ada-srsf",
            "--rules", "code", "--reference-poll", "--json", str(out), "--out",
            str(tmp_path / "o")]  # fmt: skip
    assert main(argv) == 0
    res = json.loads(out.read_text())
    assert res["rules"]["reference_poll"] and res["rules"]["srsf_key"] == "code"
    assert res["results"]["lwf:1/ada-srsf"]["reference_polls"] > 300
    assert main(["simulate", "--rules", "code"]) == 2  # stage mode has no such rules
    assert main([*argv[:5], "--rules", "srsf-key=mine"]) == 2


def test_the_table_script_reports_mean_spread_and_range_of_the_per_set_ratios():
    from scripts.wang_authors_table import table

    jct = {1: (10.0, 20.0, 8.0), 2: (10.0, 10.0, 6.0)}  # SRSF(1), SRSF(2), Ada per seed
    rows = {("code+poll", k, s): {"avg_jct": v[i]} for k, v in jct.items()
            for i, s in enumerate(("srsf:1", "srsf:2", "ada-srsf"))}  # fmt: skip
    line = table(rows, ["code+poll"], [1, 2]).splitlines()[-1]
    # Ada / SRSF(1): 0.8 and 0.6; Ada / SRSF(2): 0.4 and 0.6
    assert "| 0.700 ± 0.141 | 0.600-0.800 | 0.500 ± 0.141 | 0.400-0.600 |" in line
    assert "0.710 / 0.669" in line  # issue #36's measurement of their code
