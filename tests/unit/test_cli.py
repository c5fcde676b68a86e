"""The ``grouper`` CLI: order and lower bound on the paper's Fig. 3 example."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from grouper.common.cluster_config import SchedulingConfig


def run(*args):
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", *args], capture_output=True, text=True, check=True
    )
    return proc.stdout


def test_order_fig3_json():
    out = json.loads(run("order", "--workload", "builtin:fig3", "--json", "-"))
    assert out["order"] == ["A/1", "A/2", "B/1", "B/2"]
    flows = out["hosts"]["src"]["flows"]
    assert {(f["stage"], f["band"]) for f in flows} == {("A/1", 1), ("B/1", 2)}
    assert out["hosts"]["src"]["send_order"] == ["A/1", "A/2", "B/1", "B/2"]


def test_lower_bound_fig3_matches_the_optimum():
    out = json.loads(run("lower-bound", "--workload", "builtin:fig3", "--json", "-"))
    assert abs(out["avg_sct_lower_bound"] - 6.5) < 1e-6


def test_lower_bound_of_cojobs_released_by_other_stages():
    """builtin:testbed relaunches a model's search when an earlier one finishes its third
    stage (arrival = that stage's completion): the LP answers, below what the simulator
    schedules (grouper 1,161 s average there)."""
    out = json.loads(run("lower-bound", "--workload", "builtin:testbed", "--json", "-"))
    assert out["stages"] == 48
    assert 0 < out["avg_sct_lower_bound"] < 1161


def test_release_constraint_makes_the_bound_exact_on_a_chain():
    import numpy as np

    from grouper.pda.lowerbound import lp_lower_bound
    from grouper.pda.snapshot import build_snapshot
    from tests.unit.helpers import one_port_cojobs

    # c1 arrives when c0's only stage completes; one port: c0 ends at 1, c1 at 2, so the
    # sum of SCTs (each from its own arrival) is 1 + 1
    hosts, cojobs = one_port_cojobs([[1.0], [1.0]])
    cojobs[1] = type(cojobs[1])(cojobs[1].cojob_id, cojobs[1].stage_iterations,
                                cojobs[1].jobs, float("inf"))  # fmt: skip
    snap = build_snapshot(cojobs, hosts)
    lb = lp_lower_bound(snap, released={1: 0})
    assert lb.value == pytest.approx(2.0)
    assert lb.completion == pytest.approx(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="finite arrival"):
        lp_lower_bound(snap)


def test_bench_coordinator_small_counts_what_it_measured():
    out = json.loads(
        run(
            "bench",
            "coordinator",
            "--agents",
            "12",
            "--stages",
            "30",
            "--changed",
            "0.5",
            "--json",
            "-",
        )  # fmt: skip
    )
    assert out["agents_synced"] == 12 and out["stages"] > 0
    assert out["updates_per_period"] > 0 and len(out["runs"]) == 3
    assert out["seconds"] == pytest.approx(sorted(out["runs"])[1])
    assert out["empty_push_acknowledged"] == 12 and out["empty_push_seconds"] > 0
    assert out["fleet_cpu_seconds_per_period"] > 0
    assert out["keep_order_within"] == SchedulingConfig.keep_order_within > 0


def test_bench_coordinator_orders_afresh_every_period_at_0():
    """PDA's order every period: progress moves some hosts' plans (the same bench keeps
    every plan at 0.5, the test below)."""
    args = ["--agents", "20", "--stages", "100", "--changed", "0.5", "--started", "together"]
    args += ["--json", "-"]
    out = json.loads(run("bench", "coordinator", *args, "--keep-order-within", "0"))
    assert out["keep_order_within"] == 0 and out["orders_kept"] == 0
    assert max(out["hosts_changed_per_period"]) > 0


def test_bench_coordinator_keeps_orders_within_a_margin():
    """Half the jobs gain an iteration per period, all from iteration 0: within 50% every
    fresh order is the last one (no stage ends, no cojob comes or goes), so no host's
    plan changes."""
    args = ["--agents", "20", "--stages", "100", "--changed", "0.5", "--started", "together"]
    args += ["--json", "-"]
    out = json.loads(run("bench", "coordinator", *args, "--keep-order-within", "0.5"))
    assert out["keep_order_within"] == 0.5 and out["orders_kept"] >= 3
    assert out["hosts_changed_per_period"] == [0, 0, 0]


def test_bench_coordinator_agents_report_progress_in_the_clusters_steps():
    """Every job gains 2 iterations a period: with a step of 10% of a stage (50-400
    iterations) the fleet, told the step by the coordinator's sync as real agents are,
    reports a job once every 25-200 periods: a few percent of the job states go."""
    args = ["--agents", "20", "--stages", "100", "--iterations", "2", "--json", "-"]
    every = json.loads(run("bench", "coordinator", *args))
    stepped = json.loads(run("bench", "coordinator", *args, "--progress-step", "0.1"))
    assert every["progress_step"] == 0 and stepped["progress_step"] == 0.1
    assert every["updates_per_period"] == 20
    assert 0 < stepped["job_states_per_period"] < every["job_states_per_period"] / 5


def test_bench_coordinator_sends_progress_as_often_as_agents_are_told():
    """Every job gains 2 iterations a period, sent in 2 parts (agents whose
    progress_interval is half the period): twice the updates and job states of one part,
    the same progress by the period's end."""
    args = ["--agents", "20", "--stages", "100", "--iterations", "2", "--json", "-"]
    once = json.loads(run("bench", "coordinator", *args))
    twice = json.loads(run("bench", "coordinator", *args, "--updates-per-period", "2"))
    assert once["updates_per_agent_per_period"] == 1
    assert twice["updates_per_agent_per_period"] == 2
    assert twice["updates_per_period"] == 2 * once["updates_per_period"] == 40
    assert twice["job_states_per_period"] == 2 * once["job_states_per_period"]


def test_bench_pda_small():
    out = json.loads(run("bench", "pda", "--hosts", "20", "--stages", "50", "--json", "-"))
    assert out["stages"] == 50 and out["hosts"] == 20 and out["nonzeros"] > 0
    assert len(out["runs"]) >= 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["simulate", "--period", "-1"], "argument --period: must be a finite number in [0, 3600]"),
        (["simulate", "--period", "nan"], "argument --period: must be a finite number"),
        (["simulate", "--scale", "-1"], "argument --scale: must be a finite number in (0, 100]"),
        (["simulate", "--load", "inf"], "argument --load: must be a finite number in (0, 10]"),
        (["simulate", "--seed", "-3"], "argument --seed: must be between 0 and"),
        (["simulate", "--keep-order-within", "2"], "argument --keep-order-within: must be a"),
        (["emulate", "--period", "0"], "argument --period: must be a finite number in [0.01, 60]"),
        (
            ["emulate", "--period", "1e-6"],
            "argument --period: must be a finite number in [0.01, 60]",
        ),
        (["simulate", "--period", "1e-6"], "argument --period: must be 0 (every event) or 0.001"),
        (["emulate", "--policies", "fs,fifo"], "--policies: unknown policy 'fifo' (known: fs,"),
        (["emulate", "--policies", ","], "--policies: name at least one policy"),
        (["emulate", "--runs", "0"], "argument --runs: must be between 1 and 20"),
        (["bench", "pda", "--stages", "100000000"], "argument --stages: must be between 1 and"),
        (["bench", "coordinator", "--agents", "1e9"], "argument --agents: expected an integer"),
        (["bench", "coordinator", "--changed", "2"], "argument --changed: must be a finite"),
        (["simulate", "sweep", "--what", "period", "--values", "1,x"], "--values: expected a num"),
        (["simulate", "sweep", "--what", "period", "--values=-1"], "--values: must be at least 0"),
        (["simulate", "sweep", "--what", "load", "--values", "nan"], "--values: must be finite"),
        (["calibrate", "--sizes", "1,x"], "--sizes: expected a number, got 'x'"),
        (["calibrate", "--sizes", "1,nan"], "--sizes: must be finite"),
        (["calibrate", "--sizes", "1,5000"], "--sizes: at most 1000 MB each"),
        (["agent", "--config", "c", "--host", "h", "--metrics-port", "70000"], "must be between"),
        (["agent", "--config", "c", "--host", "h", "--link-mbps", "nan"], "--link-mbps: must be"),
        (["coordinator", "--config", "c", "--listen", "nope"], "--listen: expected HOST:PORT"),
        (["coordinator", "--config", "c", "--metrics", "h:x"], "--metrics: expected HOST:PORT"),
        (["coordinator", "--config", "c", "--log-level", "LOUD"], "--log-level: must be one of"),
        (["bench", "pda", "--runs", "-5"], "argument --runs: must be between 3 and 1000"),
        (["bench", "ratio", "--instances", "-1"], "argument --instances: must be between 1 and"),
        (["bench", "ratio", "--max-cojobs", "1"], "argument --max-cojobs: must be between 2 and"),
        (["bench", "ratio", "--max-stages", "0"], "argument --max-stages: must be between 1 and"),
        (["bench", "agent", "--flows", "-3"], "argument --flows: must be between 10 and"),
        (["order"], "the following arguments are required: --workload"),
        # issue 33: non-ASCII digits, outputs that cannot be written, ignored flags
        (["coordinator", "--config", "c", "--listen", "h:7\u00b9"], "--listen: expected HOST:"),
        (["bench", "pda", "--hosts", "\u0663\u0660"], "--hosts: expected an integer in ASCII"),
        (["simulate", "--load", "\u0662"], "argument --load: expected a number in ASCII digits"),
        (["order", "--workload", "builtin:fig3", "--json", "/dev/full"], "'/dev/full' is a dev"),
        (["order", "--workload", "builtin:fig3", "--json", "/"], "--json: '/' is a directory"),
        (["simulate", "--out", "/dev/null/x"], "--out: '/dev/null' is not a directory"),
        (["simulate", "--what", "load"], "--what: only with simulate sweep"),
        (["run", "--cojob", "c", "--job", "j", "--stages", "\u0663", "--", "true"], "--stages[0]"),
        (["run", "--cojob", "c", "--job", "j", "--stages", "1", "--weight", "\u0663"], "ASCII"),
        (["simulate", "sweep", "--what", "period", "--values", "1,1e-6"], "or at least 0.001"),
        (["agent", "--config", "c", "--host", "h", "--nic", "eth0;reboot"], "not an interface"),
        (["coordinator", "--config", "c", "--trace", "/dev/full"], "--trace: '/dev/full' is a"),
        (["simulate", "sweep"], "--what: simulate sweep needs one"),
        (["simulate", "--workload", "builtin:fig3", "--load", "2"], "--load: workload 'builti"),
        (["simulate", "--mode", "jobs", "--period", "1"], "--period: not used with --mode jobs"),
        (["simulate", "--iteration-batch", "5"], "--iteration-batch: only with --mode jobs"),
        (["simulate", "--workload", "builtin:fig3", "--max-sim-time", "3"], "needs at least 12"),
    ],
)
def test_bad_cli_numbers_exit_2_with_one_line(args, message):
    r = subprocess.run(
        [sys.executable, "-m", "grouper.cli", *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 2
    assert r.stderr == f"grouper: error: {r.stderr.split('grouper: error: ', 1)[1]}"
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr
