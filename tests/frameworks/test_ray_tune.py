"""A real Ray Tune ASHA search under grouper: a local Ray cluster (2 CPUs, no
dashboard) started by this test inside namespace ``a``, four trials whose training
function sends its "gradients" over TCP to a sink in namespace ``b`` every iteration,
``trial_job`` and ``TrialJob.report`` in each trial (the driver runs plain Tune); agents
on both hosts and a real coordinator. Nobody registers a port.

Checked: the agent holds one job per trial with the stages ASHA runs (2, 2, 4 for
grace_period 2, reduction_factor 2, max_t 8); every job's progress is its trial's last
``training_iteration``; a trial ASHA stopped at a rung is a finished job the coordinator
logs as killed after that stage, one that ran to ``max_t`` as completed; a completed
trial's TCP bytes to ``b`` are counted as its job's (known by pid: sent in its planned
band); every job was ended by its trial's own process, not when the process exited;
afterwards no process is left in the namespace but the agent, and no job cgroup is left.
(tests/frameworks/test_ray_multinode.py runs a search across two Ray nodes.)

The driver is this module run as ``python -m tests.frameworks.test_ray_tune`` inside
the namespace (Ray's daemons and workers are then its children there).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.frameworks.ray_support import (
    RAY_ENV,
    cluster_config,
    ended_line,
    kill_strays,
    needs_ray,
    pair_hosts,
    stages_done,
    start_coordinator,
    strays,
    wait_for_lines,
)

GRACE, RF, MAX_T = 2, 2, 8
STAGES = [2, 2, 4]  # ASHA's rungs at 2 and 4 iterations, max_t 8
QUALITY = [1, 2, 3, 4]  # loss = q / iteration: lower q is better
ITER_S = 0.4
CHUNK = 256 * 1024  # bytes a trial sends per iteration


def drive(out: str, sink: str, port: int, tmp: str) -> None:
    """The driver: an ASHA search of len(QUALITY) trials, two at a time."""
    import socket

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from grouper.integrations.ray import asha_stages, trial_job

    asha = ASHAScheduler(
        metric="loss", mode="min", max_t=MAX_T, grace_period=GRACE, reduction_factor=RF
    )

    def train_fn(config: dict) -> None:
        with trial_job(asha) as job:
            with open("/proc/self/cgroup") as fh:
                cgroup = fh.read().strip()
            with socket.create_connection((sink, port), timeout=10) as conn:
                for i in range(1, MAX_T + 1):
                    conn.sendall(b"x" * CHUNK)
                    time.sleep(ITER_S)
                    metrics = {"loss": config["q"] / i, "job_error": job.error, "cgroup": cgroup}
                    job.report(metrics)

    t0 = time.monotonic()
    ray.init(
        num_cpus=2, include_dashboard=False, _temp_dir=tmp, _node_ip_address="127.0.0.1",
        object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False,
    )  # fmt: skip
    try:
        tuner = tune.Tuner(
            tune.with_resources(train_fn, {"cpu": 1}),
            param_space={"q": tune.grid_search(QUALITY)},
            tune_config=tune.TuneConfig(scheduler=asha, max_concurrent_trials=2),
            run_config=tune.RunConfig(name="grsearch", storage_path=f"{tmp}/results", verbose=0),
        )
        t1 = time.monotonic()
        grid = tuner.fit()
        took = {"init_s": t1 - t0, "fit_s": time.monotonic() - t1}
        trials = [
            {
                "id": r.metrics["trial_id"],
                "q": r.config["q"],
                "iterations": r.metrics["training_iteration"],
                "pid": r.metrics["pid"],
                "cgroup": r.metrics["cgroup"],
                "job_error": r.metrics["job_error"],
                "error": str(r.error or ""),
            }
            for r in grid
        ]
        Path(out).write_text(json.dumps({"stages": asha_stages(asha), "trials": trials, **took}))
    finally:
        ray.shutdown()


@needs_ray
def test_stages_are_the_rungs_asha_runs():
    """ASHA's own rungs (read from the scheduler) agree with the formula, including a
    fractional reduction factor; several brackets are refused."""
    from ray.tune.schedulers import ASHAScheduler

    from grouper.integrations.ray import asha_stages, rung_stages

    for grace, rf, max_t, want in [
        (GRACE, RF, MAX_T, STAGES),
        (100, 2, 800, [100, 100, 200, 400]),
        (1, 4, 100, [1, 3, 12, 48, 36]),
        (3, 1.5, 20, [3, 2, 2, 4, 5, 4]),  # rungs 3, 4.5, 6.75, 10.1, 15.2: judged at ceil
        (5, 2, 5, [5]),
    ]:
        asha = ASHAScheduler(max_t=max_t, grace_period=grace, reduction_factor=rf)
        assert asha_stages(asha) == rung_stages(grace, rf, max_t) == want
    with pytest.raises(ValueError, match="brackets=2"):
        asha_stages(ASHAScheduler(max_t=8, grace_period=1, brackets=2))


def test_the_integration_imports_nothing_of_ours_but_the_client():
    import ast

    from tests.netns import ROOT

    tree = ast.parse((ROOT / "grouper/integrations/ray.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {m for m in mods if m.split(".")[0] in ("grouper", "agent", "common", "coordinator")}
    assert ours == {"grouper.client"}


@needs_ray
@pytest.mark.parametrize("by", ["pids", "cgroup"])
def test_asha_trials_are_jobs_and_stopped_trials_end_at_their_rung(pair, tmp_path, by):
    """``by``: how the agent knows a trial's processes. ``ip netns exec`` hides cgroup2
    from the agent (pids); entered with ``nsenter --net`` it sees the host's cgroup2
    and makes each trial a cgroup of its own."""

    from tests.kernel.agent_calls import collect
    from tests.netns import ROOT, AgentProc

    hosts = pair_hosts(pair)
    cfg = cluster_config(tmp_path / "cluster.yaml", pair, "ray")
    agents = {h: AgentProc(pair, ns, h, cfg, tmp_path) for h, (ns, _, _) in hosts.items()}
    agents["a"].nsenter = by == "cgroup"
    for a in agents.values():
        a.start()
    keep = {a.proc.pid for a in agents.values()}
    coord_log = tmp_path / "coordinator.log"
    coord = start_coordinator(cfg, coord_log)
    sink = pair.sink(pair.b, 29700)
    keep.add(sink.pid)
    ray_tmp = tempfile.mkdtemp(prefix="grray", dir="/tmp")  # Ray's socket paths are short
    out = tmp_path / "search.json"
    env = {**RAY_ENV, "GROUPER_AGENT_SOCKET": str(agents["a"].registry)}
    driver_log = tmp_path / "driver.log"
    t0 = time.monotonic()
    driver = (pair.nsenter if by == "cgroup" else pair.popen)(
        pair.a, "env", *(f"{k}={v}" for k, v in env.items()), sys.executable, "-m",
        "tests.frameworks.test_ray_tune", str(out), pair.addr_b, "29700", ray_tmp,
        cwd=ROOT, stdout=driver_log.open("w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        assert driver.wait(timeout=110) == 0, driver_log.read_text()[-3000:]
        search_s = time.monotonic() - t0
        got = json.loads(out.read_text())
        trials = {t["id"]: t for t in got["trials"]}
        assert got["stages"] == STAGES and len(trials) == len(QUALITY)
        assert all(not t["error"] and not t["job_error"] for t in trials.values()), trials
        pruned = {i for i, t in trials.items() if t["iterations"] < MAX_T}
        full = set(trials) - pruned
        # ASHA: the best trial runs to max_t; the two worst are stopped at the first rung
        assert {trials[i]["q"] for i in full} >= {1} and {3, 4} <= {trials[i]["q"] for i in pruned}
        assert all(trials[i]["iterations"] == GRACE for i in pruned), trials

        jobs = {j.job.job_id: j for j in collect(agents["a"]).jobs if j.job.cojob_id == "grsearch"}
        assert set(jobs) == set(trials)
        # ended by the trial's process when Ray stopped the trial, before the process
        # exited (the agent would otherwise have finished the job itself, and logged how)
        agent_log = agents["a"].log.read_text()
        assert "exited; finished" not in agent_log and "removed; finished" not in agent_log
        for i, t in trials.items():
            k = stages_done(t["iterations"], STAGES)
            line = f"job_finished grsearch/{i} stage {k} (uid 0 pid {t['pid']})"
            assert line in agent_log, (line, agent_log[-2000:])
        for i, j in jobs.items():
            assert list(j.job.stage_iterations) == STAGES
            own = f"/grouper.jobs/grsearch/{i}"
            in_own = trials[i]["cgroup"].endswith(own)  # the trial's process, from its side
            assert in_own == (by == "cgroup"), trials[i]["cgroup"]
            assert j.finished and j.iterations_done == trials[i]["iterations"], (i, j)
        lines = {i: ended_line("grsearch", i, t["iterations"], STAGES) for i, t in trials.items()}
        text = wait_for_lines(coord_log, list(lines.values()))
        for i in pruned:
            assert lines[i] == f"job grsearch/{i} killed after stage 1 of 3"
            assert lines[i] in text, text[-2000:]
        for i in full:
            assert lines[i] in text, text[-2000:]
            assert jobs[i].bytes_sent >= CHUNK, jobs[i]  # its TCP to b, counted as the job's
            if by == "pids":  # the agent tallies the band share of pid-known jobs only
                assert jobs[i].bytes_in_planned_band >= CHUNK, jobs[i]
        # nothing of Ray left in the namespace, no job cgroup left on the host
        deadline = time.monotonic() + 15
        while left := strays(pair.a, keep):
            assert time.monotonic() < deadline, f"left running: {left}"
            time.sleep(0.2)
        cgroups = {t["cgroup"].rpartition(":")[2] for t in trials.values()}
        for cg in cgroups:
            if cg.startswith("/grouper.jobs/"):
                for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                    assert not os.path.isdir(root + cg), f"{cg} left behind"
        print(
            f"driver {search_s:.1f} s (ray.init {got['init_s']:.1f} s, fit {got['fit_s']:.1f} s);"
            f" pruned {len(pruned)} of {len(trials)}; {sorted(cgroups)}"
        )
    finally:
        kill_strays(pair, keep)  # what our driver started and left (the test fails)
        if driver.poll() is None:
            driver.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        coord.terminate()
        coord.wait(10)
        for a in agents.values():
            a.stop()


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
