"""A real Ray Tune ASHA search under grouper: a local Ray cluster (2 CPUs, no
dashboard) started by this test inside namespace ``a``, four trials whose training
function sends its "gradients" over TCP to a sink in namespace ``b`` every iteration,
``trial_job`` in each trial and ``GrouperCallback`` in the driver; agents on both hosts
and a real coordinator. Nobody registers a port.

Checked: the agent holds one job per trial with the stages ASHA runs (2, 2, 4 for
grace_period 2, reduction_factor 2, max_t 8); every job's progress is its trial's last
``training_iteration``; a trial ASHA stopped at a rung is a finished job the coordinator
logs as killed after that stage, one that ran to ``max_t`` as completed; a completed
trial's TCP bytes to ``b`` are counted as its job's (known by pid: sent in its planned
band); afterwards no process is left in the namespace but the agent, and no job cgroup
is left.

The driver is this module run as ``python -m tests.frameworks.test_ray_tune`` inside
the namespace (Ray's daemons and workers are then its children there).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from grouper.common.cluster_doc import write_cluster

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

    from grouper.integrations.ray import GrouperCallback, asha_stages, trial_job

    asha = ASHAScheduler(
        metric="loss", mode="min", max_t=MAX_T, grace_period=GRACE, reduction_factor=RF
    )

    def train_fn(config: dict) -> None:
        job = trial_job(asha)
        with open("/proc/self/cgroup") as fh:
            cgroup = fh.read().strip()
        with socket.create_connection((sink, port), timeout=10) as conn:
            for i in range(1, MAX_T + 1):
                conn.sendall(b"x" * CHUNK)
                time.sleep(ITER_S)
                tune.report({"loss": config["q"] / i, "job_error": job.error, "cgroup": cgroup})

    t0 = time.monotonic()
    ray.init(
        num_cpus=2, include_dashboard=False, _temp_dir=tmp, _node_ip_address="127.0.0.1",
        object_store_memory=100 * 2**20, log_to_driver=False, configure_logging=False,
    )  # fmt: skip
    try:
        cb = GrouperCallback(asha)
        tuner = tune.Tuner(
            tune.with_resources(train_fn, {"cpu": 1}),
            param_space={"q": tune.grid_search(QUALITY)},
            tune_config=tune.TuneConfig(scheduler=asha, max_concurrent_trials=2),
            run_config=tune.RunConfig(
                name="grsearch", storage_path=f"{tmp}/results", callbacks=[cb], verbose=0
            ),
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
        Path(out).write_text(
            json.dumps({"stages": asha_stages(asha), "trials": trials, "ended": cb.ended, **took})
        )
    finally:
        ray.shutdown()


def ns_pids(ns: str) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def ppid(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return int(next(ln.split()[1] for ln in status.splitlines() if ln.startswith("PPid:")))


def strays(ns: str, keep: set[int]) -> set[int]:
    """Processes in ``ns`` other than ``keep`` and their children (an agent's ``nft``)."""
    return {p for p in ns_pids(ns) - keep if ppid(p) not in keep}


needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")


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
    from tests.netns import GROUPER, ROOT, AgentProc
    from tests.ports import free_port

    hosts = {"a": (pair.a, pair.addr_a, pair.nic_a), "b": (pair.b, pair.addr_b, pair.nic_b)}
    cfg = write_cluster(
        tmp_path / "cluster.yaml",
        [(h, a, nic, 200) for h, (_, a, nic) in hosts.items()],
        cluster="ray",
        scheduling={"period": 0.5, "min_gap": 0.05},
        failure={"plan_ttl": 5.0, "agent_timeout": 2.0},
        agent={"metrics_port": 0, "discovery_interval": 0.05},
        coordinator={"listen": f"127.0.0.1:{free_port()}"},
        metrics={"coordinator": "127.0.0.1:0"},
    )
    agents = {h: AgentProc(pair, ns, h, cfg, tmp_path) for h, (ns, _, _) in hosts.items()}
    agents["a"].nsenter = by == "cgroup"
    for a in agents.values():
        a.start()
    keep = {a.proc.pid for a in agents.values()}
    coord_log = tmp_path / "coordinator.log"
    coord = subprocess.Popen(
        [*GROUPER, "coordinator", "--config", str(cfg)],
        stdout=coord_log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip
    sink = pair.sink(pair.b, 29700)
    keep.add(sink.pid)
    ray_tmp = tempfile.mkdtemp(prefix="grray", dir="/tmp")  # Ray's socket paths are short
    out = tmp_path / "search.json"
    env = {
        "PYTHONPATH": str(ROOT),
        "GROUPER_AGENT_SOCKET": str(agents["a"].registry),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
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
        assert got["ended"] == {i: t["iterations"] for i, t in trials.items()}

        jobs = {j.job.job_id: j for j in collect(agents["a"]).jobs if j.job.cojob_id == "grsearch"}
        assert set(jobs) == set(trials)
        # ended by the callback when Ray stopped the trial, before its process exited
        # (the agent would otherwise have finished the job itself, and logged how)
        agent_log = agents["a"].log.read_text()
        assert "exited; finished" not in agent_log and "removed; finished" not in agent_log
        for i, j in jobs.items():
            assert list(j.job.stage_iterations) == STAGES
            own = f"/grouper.jobs/grsearch/{i}"
            in_own = trials[i]["cgroup"].endswith(own)  # the trial's process, from its side
            assert in_own == (by == "cgroup"), trials[i]["cgroup"]
            assert j.finished and j.iterations_done == trials[i]["iterations"], (i, j)
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            text = coord_log.read_text()
            if all(f"grsearch/{i} " in text for i in trials):
                break
            time.sleep(0.2)
        for i in pruned:
            assert f"job grsearch/{i} killed after stage 1 of 3" in text, text[-2000:]
        for i in full:
            assert f"job grsearch/{i} completed after stage 3 of 3" in text, text[-2000:]
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
        for pid in strays(pair.a, keep) | strays(pair.b, keep):
            os.kill(pid, signal.SIGKILL)  # what our driver started and left (the test fails)
        if driver.poll() is None:
            driver.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
        coord.terminate()
        coord.wait(10)
        for a in agents.values():
            a.stop()


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
