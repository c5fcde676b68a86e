"""The scheduling loop: order -> map -> push, every period and on events.

Each agent keeps a session open and sends what changed as it happens (``serve`` of
:class:`AgentLink`); the coordinator merges those updates into the state it holds, so a
cycle starts from current state without asking anyone. Stage events trigger a cycle at
once (``event_driven``). An agent silent past ``failure.agent_timeout`` is marked down
(metric, log) and its stages age out; every other host keeps being served. Only plans
that changed are pushed, plus a keepalive well before the agents' ``plan_ttl``; an agent
that restarted (its version in force went back) gets its plan again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from grouper.common import limits as L
from grouper.common.cluster_config import ClusterConfig, HostConfig
from grouper.common.errors import ConfigError
from grouper.coordinator.heap import HeapKeeper
from grouper.coordinator.links import AgentLink
from grouper.coordinator.merge import Merger
from grouper.coordinator.metrics import CoordinatorMetrics
from grouper.coordinator.planner import Planned, plan_hosts
from grouper.coordinator.push import Pusher
from grouper.coordinator.snapshot import Model
from grouper.coordinator.stalls import StallClock
from grouper.coordinator.trace import CycleTrace
from grouper.pda.planning import Planner
from grouper.pda.snapshot import FlowTables
from grouper.v1 import agent_pb2 as pb

ORDER_SHOWN = 12  # stages named in the "order:" log line
ORDER_METRIC_MAX = 1000  # stages exported as grouper_coordinator_stage_rank
log = logging.getLogger("grouper.coordinator")


@dataclass
class CycleStats:
    trigger: str
    ingest_s: float  # merging the updates that came since the last cycle (CPU, not waited)
    collect_s: float  # the rest of the merge, the model and its snapshot (arrays)
    order_s: float  # the order (PDA)
    map_s: float  # bands, DSCPs and every host's plan
    push_s: float  # until every plan went (quiet delivery) or was acknowledged
    agents_up: int
    stages: int
    pushed: int
    order: list[str]

    @property
    def total_s(self) -> float:
        """From trigger to plans delivered: the updates were merged as they came."""
        return self.collect_s + self.order_s + self.map_s + self.push_s


class Coordinator:
    def __init__(
        self,
        cfg: ClusterConfig,
        metrics: CoordinatorMetrics | None = None,
        rpc_timeout: float | None = None,
        quiet: bool = True,
    ) -> None:
        self.heap = HeapKeeper()
        self.cfg = cfg
        self.metrics = metrics or CoordinatorMetrics()
        self.rpc_timeout = rpc_timeout or max(0.5, min(cfg.failure.agent_timeout / 2, 5.0))
        self.pusher = Pusher(self.metrics, self._mark_down, self.rpc_timeout, quiet)
        self.links = {h.name: self._open(h, cfg) for h in cfg.hosts}
        self.host_names = set(self.links)
        self.up_count = 0
        self.sessions: dict[str, asyncio.Task] = {}
        self.ingest_s = 0.0  # time spent merging updates since the last cycle
        self.updates = 0
        self.merger = Merger(tuple(self.links))
        self.tables = FlowTables()
        self.stage_started: dict[tuple[str, int], float] = {}
        self.kick = asyncio.Event()
        self.stalls = StallClock()
        self.last_stats: CycleStats | None = None
        # jobs seen ending, while agents still report them: (cojob, job) -> (how, stages)
        self.ended: dict[tuple[str, str], tuple[str, int]] = {}
        self.planner = self._planner(cfg)
        self.planned: Planned | None = None  # the last plans, patched by the next cycle

    @property
    def trace(self) -> CycleTrace | None:
        """``coordinator --trace FILE``: plans then wait for the agents' results."""
        return self.pusher.trace

    @trace.setter
    def trace(self, trace: CycleTrace | None) -> None:
        self.pusher.trace = trace

    def _open(self, host: HostConfig, cfg: ClusterConfig) -> AgentLink:
        link = AgentLink.open(host, cfg)
        link.on_result = self.pusher.on_result
        return link

    @staticmethod
    def _planner(cfg: ClusterConfig) -> Planner:
        s = cfg.scheduling
        return Planner(s.policy, cfg.queues, s.period, keep_within=s.keep_order_within)

    # -- config ----------------------------------------------------------------------
    def reload(self, cfg: ClusterConfig) -> None:
        """Apply a new (already validated) config; links of unchanged hosts are kept."""
        old = self.links
        self.links = {}
        for h in cfg.hosts:
            link = old.pop(h.name, None)
            # channel options depend on TLS and, for the reconnect backoff, the period
            redial = self.cfg.tls != cfg.tls or self.cfg.scheduling.period != cfg.scheduling.period
            if link is None or link.host != h or redial:
                if link is not None:
                    self._stop_session(h.name)
                    link.end_session()
                    asyncio.ensure_future(link.channel.close())
                link = self._open(h, cfg)
            else:
                link.end_session()  # jobs are validated against the host list: resync
            self.links[h.name] = link
        self.host_names = set(self.links)
        self.merger = Merger(tuple(self.links))  # the model is rebuilt for the new host list
        self.planned = None  # and the plans made afresh (queues may have changed)
        for name, link in self.links.items():
            jobs = {k: r for k, (_, r) in link.state.jobs.items()}
            link.state.dirty = set()
            self.merger.set_host(name, jobs, jobs)
        for name, link in old.items():
            task = self.sessions.pop(name, None)
            if task is not None:
                task.cancel()
            link.end_session()
            asyncio.ensure_future(link.channel.close())
            with contextlib.suppress(KeyError):  # never up: prometheus-client < 0.20 raises
                self.metrics.agent_up.remove(link.host.name)
        self.up_count = sum(lk.up for lk in self.links.values())
        self.metrics.agents_up.set(self.up_count)
        if (cfg.scheduling, cfg.queues) != (self.cfg.scheduling, self.cfg.queues):
            self.planner = self._planner(cfg)  # the next plan orders afresh
        self.cfg = cfg
        log.info("config reloaded: %d hosts, policy %s", len(cfg.hosts), cfg.scheduling.policy)

    # -- sessions --------------------------------------------------------------------
    def start_sessions(self) -> None:
        """A session per agent, (re)started for links that have none running."""
        for name, link in self.links.items():
            task = self.sessions.get(name)
            if task is None or task.done():
                sync = sync_request(self.cfg)
                self.sessions[name] = asyncio.create_task(
                    link.serve(sync, self._on_update, self._mark_down, self._retry)
                )

    def _stop_session(self, name: str) -> None:
        task = self.sessions.pop(name, None)
        if task is not None:
            task.cancel()

    @property
    def _retry(self) -> float:
        return min(1.0, self.cfg.scheduling.period)

    def _on_update(self, link: AgentLink, up: pb.StateUpdate) -> str:
        t0 = time.perf_counter()
        try:
            verdict, errors = link.state.apply(up, self.host_names)
        except ConfigError as exc:
            self.metrics.errors.labels("bad_report").inc()
            log.error("refused update from %s: %s", link.host.name, exc)
            return "stale"
        self.updates += 1
        for e in errors:
            self.metrics.errors.labels("bad_report").inc()
            log.warning("update from %s: %s", link.host.name, e)
        if verdict == "gap":
            self.metrics.errors.labels("update_gap").inc()
            log.warning("updates from %s: gap after %d; resyncing", link.host.name, link.state.seq)
        if verdict == "applied":
            link.last_ok, link.heard_deaf = self.stalls.heard()
            link.track.on_report(link.state.plan_version, up.full)
            kick = not link.up  # a new or restarted agent: plan for it now
            if not link.up:
                log.info("agent %s is up (plan version %d in force)", link.host.name,
                         link.state.plan_version)  # fmt: skip
                self._set_up(link, True)
            for ev in up.events:
                if ev.kind == pb.StageEvent.STAGE_STARTED:
                    if (ev.cojob_id, ev.stage) not in self.stage_started:
                        self.stage_started[ev.cojob_id, ev.stage] = ev.time
                        self.merger.touch(ev.cojob_id)
                kick = True
                if self.trace is not None:
                    self.trace.event(link.host.name, ev)
            if kick and self.cfg.scheduling.event_driven:
                self.kick.set()
        if link.state.dirty:  # merged as it comes, so that a cycle pays only for planning
            self.merger.set_host(link.host.name, *link.state.take_dirty())
        self.ingest_s += time.perf_counter() - t0
        return verdict

    async def wait_synced(self, timeout: float) -> int:
        """Wait until every agent's session holds a full update (or ``timeout``); the
        number of agents synced."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if all(not lk.state.awaiting_full for lk in self.links.values()):
                break
            await asyncio.sleep(0.01)
        return sum(not lk.state.awaiting_full for lk in self.links.values())

    def _mark_down(self, link: AgentLink, why: str) -> None:
        if link.up:
            log.warning("agent %s is down (%s)", link.host.name, why)
            self.metrics.errors.labels("agent_down").inc()
        self._set_up(link, False)

    def _set_up(self, link: AgentLink, up: bool) -> None:
        """Per-host and total gauges change together, so a scrape never sees them disagree."""
        self.up_count += int(up) - int(link.up)
        link.up = up
        self.metrics.agent_up.labels(link.host.name).set(int(up))
        self.metrics.agents_up.set(self.up_count)

    def _order_changed(self, order: list[str]) -> None:
        """One info line per change of the global order, and its ranks as a metric (the
        first ORDER_SHOWN stages: the head of the order is what decides bands)."""
        more = f" (+{len(order) - ORDER_SHOWN} more)" if len(order) > ORDER_SHOWN else ""
        log.info("order: %s%s", " > ".join(order[:ORDER_SHOWN]) or "(no stages)", more)
        rank = self.metrics.stage_rank
        rank.clear()
        for i, stage in enumerate(order[:ORDER_METRIC_MAX]):
            rank.labels(stage).set(i + 1)

    async def cycle(self, trigger: str = "period") -> CycleStats:
        links = list(self.links.values())
        t1 = time.perf_counter()
        ingest, self.ingest_s = self.ingest_s, 0.0
        traced = self.trace.take_events() if self.trace is not None else []
        model = self._collect(links)
        planned = plan_hosts(model, self.planner, time.monotonic(), self.tables, self.planned)
        self.planned = planned
        if planned.fresh:
            self.metrics.fresh_orders.labels("kept" if planned.kept else "new").inc()
        t2 = time.perf_counter()
        planned_at = time.time()
        if self.last_stats is None or planned.order != self.last_stats.order:
            self._order_changed(planned.order)
        now = time.monotonic()
        keepalive, repair = self.cfg.failure.plan_ttl / 3, self._repair_after
        todo = [(link, planned.plans.get(link.host.name, {})) for link in links if link.up]
        todo = [(lk, p) for lk, p in todo if lk.track.needs_push(p, now, keepalive, repair)]
        pushed = await self.pusher.push_all(todo, planned.patched)
        t3 = time.perf_counter()
        collect = t2 - t1 - planned.order_s - planned.map_s
        stats = CycleStats(trigger, ingest, collect, planned.order_s, planned.map_s, t3 - t2,
                           self.up_count, planned.stages, pushed, planned.order)  # fmt: skip
        self._record(stats, len(links))
        if self.trace is not None:
            self.trace.cycle(trigger, traced, planned_at)
        self.heap.after_cycle()
        return stats

    @property
    def _repair_after(self) -> float:
        """A plan not confirmed this long after it went is sent again whole: two of the
        agents' progress intervals (they acknowledge within one), or two cycles when
        cycles take longer (an overloaded coordinator reads acknowledgements late, and
        must not take them for losses and resend every plan whole)."""
        last = self.last_stats.total_s if self.last_stats is not None else 0.0
        return max(2 * sync_request(self.cfg).interval, 2 * last)

    def _collect(self, links: list[AgentLink]) -> Model:
        """Liveness, ageing out, the jobs ended, and the model from the merged updates."""
        timeout = self.cfg.failure.agent_timeout
        for link in links:
            # silence while we were listening: our own stalls are not the agent's
            silent = self.stalls.silence(link.last_ok, link.heard_deaf)
            if link.up and silent > timeout:
                self._mark_down(link, f"no update for {timeout:.1f}s")
                link.end_session()  # its session is reopened
            link.age_out(timeout, silent)
        self._note_ended(links)
        for link in links:
            if link.state.dirty:
                self.merger.set_host(link.host.name, *link.state.take_dirty())
        return self.merger.model(self.stage_started)

    def _record(self, stats: CycleStats, agents: int) -> None:
        m = self.metrics
        m.cycles.labels(stats.trigger).inc()
        for step, s in (
            ("ingest", stats.ingest_s),
            ("collect", stats.collect_s),
            ("order", stats.order_s),
            ("map", stats.map_s),
            ("push", stats.push_s),
            ("total", stats.total_s),
        ):
            m.cycle_seconds.labels(step).set(s)
        m.stages.set(stats.stages)
        if stats.pushed:
            log.info(
                "cycle (%s): %d/%d agents up, %d stages, %d plans pushed, %.0f ms",
                stats.trigger,
                stats.agents_up,
                agents,
                stats.stages,
                stats.pushed,
                stats.total_s * 1e3,
            )
        self.last_stats = stats

    def _note_ended(self, links: list[AgentLink]) -> None:
        """Log each job once when it ends: completed, or killed after stage k (a pruned
        trial). Forgotten when no agent reports it any more."""
        reported = set()
        for link in links:
            held = link.state.jobs
            for key in link.state.finished:
                jr = held[key][1]
                reported.add(key)
                if key in self.ended:
                    continue
                stages, bound = 0, 0
                for n in jr.job.stage_iterations:
                    bound += n
                    if jr.iterations_done >= bound:
                        stages += 1
                how = "completed" if stages == len(jr.job.stage_iterations) else "killed"
                self.ended[key] = (how, stages)
                self.metrics.jobs_ended.labels(how).inc()
                log.info(
                    "job %s/%s %s after stage %d of %d",
                    key[0], key[1], how, stages, len(jr.job.stage_iterations),
                )  # fmt: skip
        self.ended = {k: v for k, v in self.ended.items() if k in reported}

    # -- the loop --------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        watch = asyncio.create_task(self.stalls.run())  # our own stalls, measured
        try:
            await self._run(stop)
        finally:
            watch.cancel()

    async def _run(self, stop: asyncio.Event) -> None:
        # the first plans wait for every agent's full update (or agent_timeout): plans
        # made from some hosts' jobs only would misplace the rest until the next cycle
        self.start_sessions()
        await self.wait_synced(self.cfg.failure.agent_timeout)
        last = -1e9
        while not stop.is_set():
            self.start_sessions()
            gap = self.cfg.scheduling.min_gap - (time.monotonic() - last)
            if gap > 0:
                await asyncio.sleep(gap)
            trigger = "event" if self.kick.is_set() else "period"
            self.kick.clear()
            last = time.monotonic()
            try:
                await self.cycle(trigger)
            except Exception:  # never let one bad cycle stop the coordinator
                self.metrics.errors.labels("cycle").inc()
                log.exception("scheduling cycle failed")
            waiters = [
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(self.kick.wait()),
            ]
            await asyncio.wait(
                waiters, timeout=self.cfg.scheduling.period, return_when=asyncio.FIRST_COMPLETED
            )
            for w in waiters:
                w.cancel()

    async def close(self) -> None:
        for name in list(self.sessions):
            self._stop_session(name)
        for link in self.links.values():
            link.end_session()
        await asyncio.gather(*(link.channel.close() for link in self.links.values()))
        self.heap.close()


def sync_request(cfg: ClusterConfig) -> pb.SyncRequest:
    """What every agent is told with its sync: progress four times a period unless the
    cluster says how often (scheduling.progress_interval), so a cycle sees it at most a
    quarter period old (agents update on their own clocks; events come at once); a
    heartbeat at least three times per agent_timeout; the progress step; states by key."""
    s = cfg.scheduling
    least = L.MIN_PROGRESS_INTERVAL
    heartbeat = max(least, cfg.failure.agent_timeout / 3)
    interval = max(least, min(s.progress_interval or s.period / 4, heartbeat))
    return pb.SyncRequest(
        interval=interval, heartbeat=heartbeat, progress_step=s.progress_step, jobs_by_key=True
    )
