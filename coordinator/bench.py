"""``grouper bench coordinator``: the coordinator's cycle against a fleet of agents.

The agents are virtual (``coordinator/fleet.py``): one gRPC server in a process of its
own (so it has a core of its own) answers for all of them over the Session protocol
real agents speak: a full update on sync, then every period a delta for each agent
holding one of the jobs that made progress (``--changed``, a share of all jobs, each
``--iterations`` more on every host it runs on, reported in the steps of the cluster's
``scheduling.progress_step``); each checks, holds and acknowledges the plans it gets.
The jobs start spread over their first stage (``--started``), so stages end as on a
cluster. The coordinator runs here as in production and is measured per period: the cycle
split into collect (the model and its snapshot), order (PDA), map (bands, DSCPs, host
plans) and deliver (until every plan went, or was acknowledged with ``--delivery
result``); until every plan was acknowledged; the merging of the period's updates as
they came; the CPU seconds the coordinator process spent in the period, from the
fleet's progress to the last acknowledgement (all of it: gRPC, merging, cycle); the
fleet's CPU seconds in the same span; and the share of hosts whose plan (what their
kernel enforces) changed. Every measured cycle orders afresh: the bench waits out the
period since the last fresh order first (a quick cycle inside it would keep the old
order, change no band and push nothing).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from grouper.common.cluster_config import SchedulingConfig, parse_cluster_config
from grouper.common.cluster_doc import cluster_doc
from grouper.common.errors import ConfigError
from grouper.common.output import write_json
from grouper.coordinator.fleet import fleet_main, raise_nofile
from grouper.coordinator.loop import Coordinator, CycleStats

DELIVERY = ("update", "result")  # acknowledged by the next update, or by a result


@dataclass(frozen=True)
class Knobs:
    """What a bench run varies besides its size."""

    changed: float = 1.0  # share of the jobs progressing per period
    iterations: int = 1  # iterations each of them gains per period
    spread: bool = True  # jobs somewhere in their first stage (else all at iteration 0)
    delivery: str = "update"
    keep: float = SchedulingConfig.keep_order_within  # scheduling.keep_order_within
    step: float = 0.0  # scheduling.progress_step
    parts: int = 1  # progress sent this many times a period (agents: period / interval)


@dataclass
class Period:
    stats: CycleStats
    acked_s: float  # from the cycle's start until every plan pushed was acknowledged
    cpu_s: float  # the coordinator's, from the fleet's progress to the last acknowledgement
    fleet_cpu_s: float
    updates: int
    job_states: int  # in those updates
    changed_hosts: int  # hosts whose plan differs from the last cycle's


def _config(hosts: list[str], port: int, period: float, keep: float, step: float = 0.0) -> Any:
    """The cluster: every agent is the fleet's server, told apart by the header (a
    config names one endpoint per host: they are set after parsing)."""
    cfg = parse_cluster_config(
        cluster_doc(
            [(h, f"10.{i // 250}.{i % 250}.1", "eth0") for i, h in enumerate(hosts)],
            cluster="bench",
            scheduling={"period": period, "keep_order_within": keep, "progress_step": step},
            failure={"agent_timeout": 600, "plan_ttl": 3600},
        )
    )
    fleet = f"127.0.0.1:{port}"
    return replace(cfg, hosts=tuple(replace(h, agent=fleet) for h in cfg.hosts))


async def _period(coord: Coordinator, conn: Any, parts: int) -> Period:
    loop = asyncio.get_running_loop()
    cpu0 = time.process_time()
    fleet0 = await loop.run_in_executor(None, _ask, conn, "cpu")
    coord.updates = sent = states = 0
    for part in range(parts):  # the period's progress, as agents send it on their clocks
        more, in_them = await loop.run_in_executor(None, _ask, conn, ("tick", part, parts))
        sent, states = sent + more, states + in_them
        await _until(lambda s=sent: coord.updates >= s, 60)
    # a plan within a period of the last fresh order keeps that order (and pushes
    # nothing new): each measured cycle orders afresh
    await asyncio.sleep(max(0.0, coord.planner.next_fresh - time.monotonic()))
    before = coord.planned.plans if coord.planned is not None else {}
    t0 = time.perf_counter()
    stats = await coord.cycle("bench")
    after = coord.planned.plans if coord.planned is not None else {}
    await _until(_all_confirmed(coord), 60)
    acked = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    fleet_cpu = await loop.run_in_executor(None, _ask, conn, "cpu") - fleet0
    changed = sum(1 for h, p in after.items() if before.get(h) != p)
    return Period(stats, acked, cpu, fleet_cpu, sent, states, changed)


async def _run(agents: int, runs: int, knobs: Knobs, conn: Any, port: int,
               hosts: list[str]) -> dict:  # fmt: skip
    raise_nofile(agents)
    cfg = _config(hosts, port, 1.0, knobs.keep, knobs.step)
    coord = Coordinator(cfg, rpc_timeout=60.0, quiet=knobs.delivery == "update")
    try:
        t0 = time.perf_counter()
        coord.start_sessions()
        synced = await coord.wait_synced(600)
        sync_s = time.perf_counter() - t0
        first = await coord.cycle("first")  # plans for every agent
        periods = [await _period(coord, conn, knobs.parts) for _ in range(runs)]
        floor, acked = await _empty_push(coord)
        kept = coord.planner.kept
    finally:
        await coord.close()
    result = _result(agents, synced, sync_s, first, periods)
    result["empty_push_seconds"], result["empty_push_acknowledged"] = floor, acked
    result["delivery"] = knobs.delivery
    result["keep_order_within"], result["orders_kept"] = knobs.keep, kept
    result["changed"], result["iterations"] = knobs.changed, knobs.iterations
    result["started"] = "spread" if knobs.spread else "together"
    result["progress_step"] = knobs.step
    result["updates_per_agent_per_period"] = knobs.parts
    return result


def _ask(conn: Any, cmd: str | tuple) -> Any:
    conn.send(cmd)
    return conn.recv()


async def _empty_push(coord: Coordinator) -> tuple[float, int]:
    """Seconds to push every agent an empty delta (a keepalive: its plan again) until
    every one is acknowledged, and how many were: the delivery's floor with nothing
    planned (gRPC and the session's bookkeeping only)."""
    links = [lk for lk in coord.links.values() if lk.up and lk.track.sent is not None]
    t = time.perf_counter()
    await coord.pusher.push_all([(lk, lk.track.sent) for lk in links])
    await _until(lambda: all(lk.track.confirmed for lk in links), 60)
    return time.perf_counter() - t, sum(lk.track.confirmed for lk in links)


def _all_confirmed(coord: Coordinator) -> Callable[[], bool]:
    """Whether every link up holds the last plan pushed, looked at from a cursor: a
    check every 5 ms over all 10,000 links cost 0.05-0.2 s of the CPU counted as the
    coordinator's per period. The last check goes over all of them again."""
    links, at = list(coord.links.values()), 0

    def check() -> bool:
        nonlocal at
        while at < len(links) and (not links[at].up or links[at].track.confirmed):
            at += 1
        if at < len(links):
            return False
        if all(lk.track.confirmed for lk in links if lk.up):
            return True
        at = 0  # one pushed again since it was passed: look from the start
        return False

    return check


async def _until(cond: Any, timeout: float) -> None:
    end = time.monotonic() + timeout
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.005)


def _result(agents: int, synced: int, sync_s: float, first: CycleStats,
            periods: list[Period]) -> dict:  # fmt: skip
    med = sorted(periods, key=lambda p: p.stats.total_s)[len(periods) // 2]
    s = med.stats
    return {
        "seconds": statistics.median(p.stats.total_s for p in periods),
        "collect_seconds": s.collect_s,
        "order_seconds": s.order_s,
        "map_seconds": s.map_s,
        "deliver_seconds": s.push_s,
        "push_seconds": s.push_s,
        "acknowledged_seconds": med.acked_s,
        "ingest_seconds": s.ingest_s,
        "coordinator_cpu_seconds": med.cpu_s,
        "cpu_seconds_per_period": med.cpu_s,
        "fleet_cpu_seconds": med.fleet_cpu_s,
        "fleet_cpu_seconds_per_period": med.fleet_cpu_s,
        "updates_per_period": med.updates,
        "job_states_per_period": med.job_states,
        "plans_pushed": s.pushed,
        "hosts_changed": med.changed_hosts,
        "hosts_changed_share": med.changed_hosts / agents,
        "hosts_changed_per_period": [p.changed_hosts for p in periods],
        "agents": agents,
        "agents_synced": synced,
        "initial_sync_seconds": sync_s,
        "first_cycle_seconds": first.total_s,
        "stages": s.stages,
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "runs": [p.stats.total_s for p in periods],
        "cpu_seconds_runs": [p.cpu_s for p in periods],
    }


def bench_coordinator(agents: int, stages: int, seed: int, runs: int, json_path: str | None,
                      knobs: Knobs = Knobs()) -> int:  # fmt: skip
    if agents < 2:
        raise ConfigError("--agents", f"must be at least 2, got {agents}")
    if not 0.0 <= knobs.changed <= 1.0:
        raise ConfigError("--changed", f"must be within [0, 1], got {knobs.changed}")
    if knobs.delivery not in DELIVERY:
        raise ConfigError(
            "--delivery", f"must be one of {', '.join(DELIVERY)}, got {knobs.delivery!r}"
        )
    ctx = mp.get_context("spawn")
    here, there = ctx.Pipe()
    fleet = ctx.Process(
        target=fleet_main,
        args=(there, agents, stages, seed, knobs.changed, knobs.iterations, knobs.spread),
    )
    fleet.start()
    try:
        port, hosts = here.recv()
        result = asyncio.run(_run(agents, max(runs, 3), knobs, here, port, hosts))
        here.send("stop")
    finally:
        fleet.join(timeout=30)
        if fleet.is_alive():
            fleet.kill()
    write_json(result, json_path)
    if json_path != "-":
        print(_summary(result))
    return 0


def _summary(r: dict) -> str:
    ms = {
        k: r[f"{k}_seconds"] * 1e3 for k in ("collect", "order", "map", "deliver", "acknowledged")
    }
    return (
        f"coordinator, {r['agents']} agents, {r['stages']} stages, {r['changed']:.0%} of jobs "
        f"changing, delivery by {r['delivery']}: cycle {r['seconds'] * 1e3:.0f} ms (collect "
        f"{ms['collect']:.0f}, order {ms['order']:.0f}, map {ms['map']:.0f}, deliver "
        f"{ms['deliver']:.0f}; {r['plans_pushed']} plans, {r['hosts_changed_share']:.1%} of "
        f"hosts changed), all acknowledged {ms['acknowledged']:.0f} ms; merging "
        f"{r['updates_per_period']} updates ({r['job_states_per_period']} job states) "
        f"{r['ingest_seconds'] * 1e3:.0f} ms; CPU "
        f"{r['coordinator_cpu_seconds']:.2f} s per period (fleet {r['fleet_cpu_seconds']:.2f} s),"
        f" RSS {r['max_rss_mb']:.0f} MB; an empty delta to every agent "
        f"{r['empty_push_seconds'] * 1e3:.0f} ms"
    )
