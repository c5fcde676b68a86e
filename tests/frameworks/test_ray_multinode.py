"""A Ray Tune ASHA search across two Ray nodes under grouper: ``ray start --head`` in
namespace ``a``, ``ray start --address`` in namespace ``b``, each with its namespace's
``--node-ip-address`` and one CPU; an agent in each namespace (``b``'s entered with
``nsenter --net``, so it makes each trial a cgroup of its own; ``a``'s knows trials by
pid) and a real coordinator. A custom resource per node (``grouper_a``, ``grouper_b``)
places each trial: three on ``b``, two on ``a``. Every trial's training function sends
its "gradients" over TCP to a sink on the other host each iteration; only
``trial_job`` and ``TrialJob.report`` are ours, in the trial: the driver runs plain
Tune, with no grouper socket in its environment.

Checked: each trial ran on the node it was placed on and is registered with that
node's agent only (stages 2, 2, 4 for grace_period 2, reduction_factor 2, max_t 8);
its job's progress is its trial's last ``training_iteration``; the coordinator logs
each trial on ``b`` as completed after stage 3, or killed after the stage of the rung
ASHA stopped it at; a trial on ``b`` was ended by its own process (the agent logs the
call from the trial's pid) within a few seconds of Tune ending it, not when its process
exited; Tune reused a worker process on ``b`` for a later trial; a completed trial's
bytes to ``a`` are its job's. Afterwards no process is left in either namespace (the
Ray nodes are stopped by the pids we started) and no job cgroup is left.

The driver is this module run as ``python -m tests.frameworks.test_ray_multinode``
inside namespace ``a``.
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

from tests.frameworks.ray_support import (
    RAY_ENV,
    RayNode,
    cluster_config,
    ended_line,
    kill_strays,
    log_times,
    needs_ray,
    pair_hosts,
    stages_done,
    start_coordinator,
    strays,
    wait_for_lines,
)

GRACE, RF, MAX_T = 2, 2, 8
STAGES = [2, 2, 4]
# (quality, node) in the order Tune starts them: loss = q / iteration, lower is better.
# On b, q=1 goes first and is the best at every rung (it runs to max_t); q=5 and 6 come
# after it and are worse than all it recorded at the first rung (ASHA stops them there)
TRIALS = [(1, "b"), (2, "a"), (5, "b"), (3, "a"), (6, "b")]
ITER_S = 0.3
CHUNK = 256 * 1024  # bytes a trial sends per iteration
SINK_PORT = 29710
COJOB = "grmulti"


def drive(out: str, head: str, ip: str, sinks: dict[str, str]) -> None:
    """The driver: plain Tune, one trial per node at a time (each node has one
    ``grouper_<node>``); ``sinks``: where a trial on each node sends."""
    import socket

    import ray
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler

    from grouper.integrations.ray import asha_stages, trial_job

    asha = ASHAScheduler(
        metric="loss", mode="min", max_t=MAX_T, grace_period=GRACE, reduction_factor=RF
    )

    def train_fn(config: dict) -> None:
        q, node = config["trial"]["q"], config["trial"]["node"]
        with trial_job(asha) as job:
            with open("/proc/self/cgroup") as fh:
                cgroup = fh.read().strip()
            with socket.create_connection((sinks[node], SINK_PORT), 10) as conn:
                for i in range(1, MAX_T + 1):
                    conn.sendall(b"x" * CHUNK)
                    time.sleep(ITER_S)
                    metrics = {"loss": q / i, "job_error": job.error, "cgroup": cgroup}
                    job.report(metrics)

    class Ends(tune.Callback):  # when Tune ended each trial, by the driver's clock
        def __init__(self) -> None:
            self.at: dict[str, float] = {}

        def on_trial_complete(self, iteration, trials, trial, **info) -> None:  # noqa: ANN001
            self.at[trial.trial_id] = time.time()

        on_trial_error = on_trial_complete

    t0 = time.monotonic()
    ray.init(address=head, _node_ip_address=ip, log_to_driver=False, configure_logging=False)
    try:
        while "grouper_b" not in ray.cluster_resources():  # the second node has joined
            assert time.monotonic() - t0 < 30, ray.cluster_resources()
            time.sleep(0.1)
        ends = Ends()
        tuner = tune.Tuner(
            tune.with_resources(train_fn, lambda c: {"cpu": 1, f"grouper_{c['trial']['node']}": 1}),
            param_space={"trial": tune.grid_search([{"q": q, "node": h} for q, h in TRIALS])},
            tune_config=tune.TuneConfig(scheduler=asha, reuse_actors=True),
            run_config=tune.RunConfig(
                name=COJOB, storage_path=f"{tempfile.gettempdir()}/{COJOB}-{os.getpid()}",
                callbacks=[ends], verbose=0,
            ),
        )  # fmt: skip
        t1 = time.monotonic()
        grid = tuner.fit()
        took = {"init_s": t1 - t0, "fit_s": time.monotonic() - t1}
        trials = [
            {
                "id": r.metrics["trial_id"],
                "q": r.config["trial"]["q"],
                "node": r.config["trial"]["node"],
                "node_ip": r.metrics["node_ip"],
                "iterations": r.metrics["training_iteration"],
                "pid": r.metrics["pid"],
                "cgroup": r.metrics["cgroup"],
                "job_error": r.metrics["job_error"],
                "error": str(r.error or ""),
                "ended_at": ends.at.get(r.metrics["trial_id"]),
            }
            for r in grid
        ]
        Path(out).write_text(json.dumps({"stages": asha_stages(asha), "trials": trials, **took}))
        shutil.rmtree(f"{tempfile.gettempdir()}/{COJOB}-{os.getpid()}", ignore_errors=True)
    finally:
        ray.shutdown()


def node_of(q: int) -> str:
    return dict(TRIALS)[q]


@needs_ray
def test_trials_on_the_second_node_advance_and_end_through_its_agent(pair, tmp_path):
    from tests.kernel.agent_calls import collect
    from tests.netns import ROOT, AgentProc

    hosts = pair_hosts(pair)
    cfg = cluster_config(tmp_path / "cluster.yaml", pair, "raymulti")
    agents = {h: AgentProc(pair, ns, h, cfg, tmp_path) for h, (ns, _, _) in hosts.items()}
    agents["b"].nsenter = True  # sees cgroup2: a cgroup per trial
    for a in agents.values():
        a.start()
    keep = {a.proc.pid for a in agents.values()}
    coord_log = tmp_path / "coordinator.log"
    coord = start_coordinator(cfg, coord_log)
    for ns in (pair.a, pair.b):
        keep.add(pair.sink(ns, SINK_PORT).pid)
    ray_tmp = tempfile.mkdtemp(prefix="grray", dir="/tmp")  # Ray's socket paths are short
    nodes: list[RayNode] = []
    driver = None
    try:
        head = f"{pair.addr_a}:6379"
        t0 = time.monotonic()
        for h, extra in (("a", {"head": True}), ("b", {"address": head})):
            ns, ip, _ = hosts[h]
            node = RayNode(
                pair, ns, ip, f"{ray_tmp}/{h}", tmp_path / f"ray-{h}.log",
                resources=json.dumps({f"grouper_{h}": 1}), nsenter=h == "b",
                env={"GROUPER_AGENT_SOCKET": str(agents[h].registry)}, **extra,
            )  # fmt: skip
            nodes.append(node.wait_up())
        keep |= {n.proc.pid for n in nodes}
        up_s = time.monotonic() - t0
        out = tmp_path / "search.json"
        driver_log = tmp_path / "driver.log"
        sinks = {"a": pair.addr_b, "b": pair.addr_a}  # each trial sends to the other host
        driver = pair.popen(
            pair.a, "env", *(f"{k}={v}" for k, v in RAY_ENV.items()), sys.executable, "-m",
            "tests.frameworks.test_ray_multinode", str(out), head, pair.addr_a,
            json.dumps(sinks), cwd=ROOT, stdout=driver_log.open("w"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        assert driver.wait(timeout=80) == 0, driver_log.read_text()[-3000:]
        got = json.loads(out.read_text())
        trials = {t["id"]: t for t in got["trials"]}
        assert got["stages"] == STAGES and len(trials) == len(TRIALS)
        assert all(not t["error"] and not t["job_error"] for t in trials.values()), trials
        on = {h: {i for i, t in trials.items() if t["node"] == h} for h in hosts}
        for t in trials.values():  # placed by its resource, on that namespace's node
            assert t["node"] == node_of(t["q"]) and t["node_ip"] == hosts[t["node"]][1], t
        stopped = {i for i in on["b"] if trials[i]["iterations"] < MAX_T}
        assert stopped and stopped != on["b"], trials  # b: a trial stopped, one completed
        assert {trials[i]["q"] for i in on["b"] - stopped} == {1}
        assert all(trials[i]["iterations"] == GRACE for i in stopped), trials
        # Tune gave a trial's worker process on b to a later trial (actor reuse)
        assert len({trials[i]["pid"] for i in on["b"]}) < len(on["b"]), trials

        # every trial is its own node's agent's job, with its trial's progress
        for h, agent in agents.items():
            jobs = {j.job.job_id: j for j in collect(agent).jobs if j.job.cojob_id == COJOB}
            assert set(jobs) == on[h], (h, set(jobs), on[h])
            for i, j in jobs.items():
                assert list(j.job.stage_iterations) == STAGES
                assert j.finished and j.iterations_done == trials[i]["iterations"], (i, j)
                own = f"/grouper.jobs/{COJOB}/{i}"
                assert trials[i]["cgroup"].endswith(own) == (h == "b"), trials[i]["cgroup"]
                if trials[i]["iterations"] == MAX_T:
                    assert j.bytes_sent >= CHUNK, j  # its TCP to the other host
        # ended by the trial's own process, soon after Tune ended the trial
        b_log = agents["b"].log
        assert "exited; finished" not in b_log.read_text(), b_log.read_text()[-2000:]
        for i in on["b"]:
            t = trials[i]
            k = stages_done(t["iterations"], STAGES)
            line = f"job_finished {COJOB}/{i} stage {k} (uid 0 pid {t['pid']})"
            (at,) = log_times(b_log, line) or [None]
            assert at is not None, (line, b_log.read_text()[-3000:])
            assert -1.0 < at - t["ended_at"] < 5.0, (i, at - t["ended_at"])

        # the coordinator's view: each trial advanced through the stages it ran, ended
        lines = {i: ended_line(COJOB, i, t["iterations"], STAGES) for i, t in trials.items()}
        text = wait_for_lines(coord_log, list(lines.values()))
        for i in on["b"] | on["a"]:
            assert lines[i] in text, (lines[i], text[-3000:])
        print(
            f"ray up {up_s:.1f} s, driver: ray.init {got['init_s']:.1f} s,"
            f" fit {got['fit_s']:.1f} s; stopped on b: {len(stopped)} of {len(on['b'])}"
        )

        for n in reversed(nodes):  # b, then the head
            n.stop()
        deadline = time.monotonic() + 15
        while left := strays(pair.a, keep) | strays(pair.b, keep):
            assert time.monotonic() < deadline, f"left running: {left}"
            time.sleep(0.2)
        for t in trials.values():
            cg = t["cgroup"].rpartition(":")[2]
            if cg.startswith("/grouper.jobs/"):
                for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):
                    assert not os.path.isdir(root + cg), f"{cg} left behind"
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        for n in reversed(nodes):
            n.stop()
        kill_strays(pair, {a.proc.pid for a in agents.values()})
        shutil.rmtree(ray_tmp, ignore_errors=True)
        coord.terminate()
        coord.wait(10)
        for a in agents.values():
            a.stop()


if __name__ == "__main__":
    drive(sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4]))
