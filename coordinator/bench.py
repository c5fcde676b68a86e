"""``grouper bench coordinator``: the coordinator's cycle against a fleet of agents.

The agents are virtual: one gRPC server in a separate process (so it has a core of its
own) answers for all of them, told apart by the ``x-grouper-host`` header, over the
same Session protocol real agents speak: a full update on sync, then every period a
delta for each agent holding one of the jobs that made progress (``--changed``, a
share of all jobs, each +1 iteration on every host it runs on). The coordinator runs
here as in production and is measured per period: the cycle (order, push: the time
from trigger to acknowledged plans), the merging of the period's updates, the CPU
seconds the coordinator process spent in the period (all of it: gRPC, merging,
cycle), and peak RSS. Every measured cycle orders afresh: the bench waits out the
period since the last fresh order first (a quick cycle inside it would keep the old
order, change no band and push nothing).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
import statistics
import time
from typing import Any

import grpc
import numpy as np

from common.errors import ConfigError
from common.output import write_json
from coordinator.loop import Coordinator
from grouper.cluster_config import parse_cluster_config
from grouper.v1 import agent_pb2 as pb
from workloads.random_instance import random_cojobs

Key = tuple[str, str]


def fleet_states(hosts: int, stages: int, seed: int) -> dict[str, dict[Key, pb.JobState]]:
    """Each virtual agent's jobs: the flows each host sends of a random instance."""
    names, cojobs = random_cojobs(hosts, stages, seed)
    per_host: dict[str, dict[Key, pb.JobState]] = {h: {} for h in names}
    for cj in cojobs:
        for job in cj.jobs:
            by_src: dict[str, list[pb.FlowSpec]] = {}
            for k, f in enumerate(job.flows):
                if f.src != f.dst:
                    by_src.setdefault(f.src, []).append(
                        pb.FlowSpec(
                            src_host=f.src,
                            dst_host=f.dst,
                            dst_port=20000 + k,
                            bytes_per_iteration=f.bytes,
                        )
                    )
            for src, flows in by_src.items():
                per_host[src][cj.cojob_id, job.job_id] = pb.JobState(
                    job=pb.JobRegistration(
                        cojob_id=cj.cojob_id,
                        job_id=job.job_id,
                        arch="flows",
                        stage_iterations=list(cj.stage_iterations),
                        arrival=1.0 + len(per_host),
                        flows=flows,
                    )
                )
    return per_host


class Fleet:
    """Every virtual agent's end of the Session."""

    def __init__(self, hosts: int, stages: int, seed: int, changed: float) -> None:
        self.states = fleet_states(hosts, stages, seed)
        self.holders: dict[Key, list[str]] = {}
        for h, jobs in self.states.items():
            for key in jobs:
                self.holders.setdefault(key, []).append(h)
        self.keys = sorted(self.holders)
        self.changed = changed
        self.rng = np.random.default_rng(seed)
        self.seq = dict.fromkeys(self.states, 0)
        self.version = dict.fromkeys(self.states, 0)  # the plan each agent holds
        self.out: dict[str, asyncio.Queue[bytes]] = {}

    def _update(self, host: str, full: bool, jobs: list[pb.JobState]) -> bytes:
        self.seq[host] += 1
        up = pb.StateUpdate(host=host, epoch=7, seq=self.seq[host], full=full, jobs=jobs,
                            plan_version=self.version[host], priorities_active=True)  # fmt: skip
        return pb.SessionReply(update=up).SerializeToString()

    def progress(self) -> int:
        """One period's progress: a share of all jobs gains an iteration. Updates sent."""
        n = round(self.changed * len(self.keys))
        picked = self.rng.choice(len(self.keys), size=n, replace=False) if n else []
        touched: dict[str, list[pb.JobState]] = {}
        for i in picked:
            key = self.keys[int(i)]
            for h in self.holders[key]:
                js = self.states[h][key]
                js.iterations_done = min(js.iterations_done + 1, sum(js.job.stage_iterations))
                touched.setdefault(h, []).append(js)
        for h, jobs in touched.items():
            if h in self.out:
                self.out[h].put_nowait(self._update(h, False, jobs))
        return len(touched)

    async def session(self, requests: Any, context: Any) -> Any:
        host = dict(context.invocation_metadata())["x-grouper-host"]
        q: asyncio.Queue[bytes] = asyncio.Queue()
        self.out[host] = q

        async def read() -> None:
            async for raw in requests:
                req = pb.SessionRequest.FromString(raw)
                if req.HasField("plan"):  # applied as a real agent would: version in force
                    self.version[host] = max(self.version[host], req.plan.version)
                    res = pb.ApplyResult(applied=True, version=self.version[host])
                    q.put_nowait(pb.SessionReply(result=res).SerializeToString())
                elif req.HasField("sync"):
                    q.put_nowait(self._update(host, True, list(self.states[host].values())))

        reader = asyncio.create_task(read())
        try:
            while True:
                yield await q.get()
        finally:
            reader.cancel()

    def handler(self) -> grpc.GenericRpcHandler:
        ident = lambda b: b  # noqa: E731 - raw bytes in and out
        return grpc.method_handlers_generic_handler(
            "grouper.v1.Agent",
            {"Session": grpc.stream_stream_rpc_method_handler(self.session, ident, ident)},
        )


def _raise_nofile(agents: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * agents + 1024)), hard))


def _fleet_main(conn: Any, agents: int, stages: int, seed: int, changed: float) -> None:
    async def main() -> None:
        _raise_nofile(agents)
        fleet = Fleet(agents, stages, seed, changed)
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((fleet.handler(),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        conn.send((port, sorted(fleet.states)))
        loop = asyncio.get_running_loop()
        while True:  # "tick": one period's progress; "cpu": CPU seconds so far; "stop"
            cmd = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            conn.send(time.process_time() if cmd == "cpu" else fleet.progress())
        await server.stop(None)

    asyncio.run(main())


async def _run(agents: int, stages: int, seed: int, runs: int, changed: float, period: float,
               conn: Any, port: int, hosts: list[str]) -> dict:  # fmt: skip
    _raise_nofile(agents)
    cfg = parse_cluster_config(
        {
            "cluster": "bench",
            "hosts": [
                {
                    "name": h,
                    "address": f"10.{i // 250}.{i % 250}.1",
                    "nic": "eth0",
                    "agent": f"127.0.0.1:{port}",
                }
                for i, h in enumerate(hosts)
            ],
            "scheduling": {"period": period},
            "failure": {"agent_timeout": 600, "plan_ttl": 3600},
        }
    )
    coord = Coordinator(cfg, rpc_timeout=60.0)
    loop = asyncio.get_running_loop()
    try:
        t0 = time.perf_counter()
        coord.start_sessions()
        synced = await coord.wait_synced(600)
        sync_s = time.perf_counter() - t0
        first = await coord.cycle("first")  # plans for every agent
        rows = []
        for _ in range(runs):
            cpu0 = time.process_time()
            fleet0 = await loop.run_in_executor(None, _ask, conn, "cpu")
            coord.updates = 0
            sent = await loop.run_in_executor(None, _ask, conn, "tick")
            await _until(lambda s=sent: coord.updates >= s, 60)
            # a plan within a period of the last fresh order keeps that order (and
            # pushes nothing new): each measured cycle orders afresh
            await asyncio.sleep(max(0.0, coord.planner.next_fresh - time.monotonic()))
            stats = await coord.cycle("bench")
            fleet_cpu = await loop.run_in_executor(None, _ask, conn, "cpu") - fleet0
            rows.append((stats, time.process_time() - cpu0, sent, fleet_cpu))
        floor, acked = await _empty_push(coord)
    finally:
        await coord.close()
    result = _result(agents, changed, synced, sync_s, first, rows)
    result["empty_push_seconds"], result["empty_push_acknowledged"] = floor, acked
    return result


def _ask(conn: Any, cmd: str) -> Any:
    conn.send(cmd)
    return conn.recv()


async def _empty_push(coord: Coordinator) -> tuple[float, int]:
    """Seconds to push every agent an empty delta (a keepalive) and have it acknowledged,
    and how many were: the push's floor with nothing planned (gRPC and the session's
    bookkeeping only)."""
    links = [lk for lk in coord.links.values() if lk.up and lk.acked is not None]
    t = time.perf_counter()
    acked = await asyncio.gather(*(coord._push(lk, lk.acked) for lk in links))
    return time.perf_counter() - t, sum(acked)


async def _until(cond: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.005)


def _result(agents: int, changed: float, synced: int, sync_s: float, first: Any,
            rows: list) -> dict:  # fmt: skip
    med = sorted(rows, key=lambda r: r[0].total_s)[len(rows) // 2]
    s = med[0]
    return {
        "seconds": statistics.median(r[0].total_s for r in rows),
        "order_seconds": s.order_s,
        "push_seconds": s.push_s,
        "ingest_seconds": s.ingest_s,
        "cpu_seconds_per_period": med[1],
        "fleet_cpu_seconds_per_period": med[3],
        "updates_per_period": med[2],
        "plans_pushed": s.pushed,
        "agents": agents,
        "agents_synced": synced,
        "initial_sync_seconds": sync_s,
        "first_cycle_seconds": first.total_s,
        "stages": s.stages,
        "changed": changed,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "runs": [r[0].total_s for r in rows],
    }


def bench_coordinator(agents: int, stages: int, seed: int, runs: int, changed: float,
                      json_path: str | None) -> int:  # fmt: skip
    if agents < 2:
        raise ConfigError("--agents", f"must be at least 2, got {agents}")
    if not 0.0 <= changed <= 1.0:
        raise ConfigError("--changed", f"must be within [0, 1], got {changed}")
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    fleet = ctx.Process(target=_fleet_main, args=(there, agents, stages, seed, changed))
    fleet.start()
    try:
        port, hosts = here.recv()
        result = asyncio.run(
            _run(agents, stages, seed, max(runs, 3), changed, 1.0, here, port, hosts)
        )
        here.send("stop")
    finally:
        fleet.join(timeout=30)
        if fleet.is_alive():
            fleet.kill()
    write_json(result, json_path)
    if json_path != "-":
        print(
            f"coordinator, {agents} agents, {result['stages']} stages, "
            f"{changed:.0%} of jobs changing: cycle {result['seconds'] * 1e3:.0f} ms "
            f"(order {result['order_seconds'] * 1e3:.0f}, push {result['push_seconds'] * 1e3:.0f};"
            f" {result['plans_pushed']} plans), merging {result['updates_per_period']} updates "
            f"{result['ingest_seconds'] * 1e3:.0f} ms, CPU {result['cpu_seconds_per_period']:.2f}"
            f" s per period (fleet {result['fleet_cpu_seconds_per_period']:.2f} s), "
            f"RSS {result['max_rss_mb']:.0f} MB; an empty delta to every agent "
            f"{result['empty_push_seconds'] * 1e3:.0f} ms"
        )
    return 0
