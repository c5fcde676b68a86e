"""The agent's logic, independent of gRPC: registry changes, plans, the plan TTL.

Daemons never crash on a bad message: every handler returns an error string instead of
raising, and the state in force stays as it was.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from grouper.agent.cgroup_watch import CgroupWatch
from grouper.agent.cgroups import CgroupRef
from grouper.agent.discovery.load import LoadEstimate
from grouper.agent.discovery.procs import Proc, alive
from grouper.agent.discovery.tracker import JobKey, Tracker
from grouper.agent.metrics import AgentMetrics
from grouper.agent.ownership import RateLimit, Refusal
from grouper.agent.peers import ROOT, Caller
from grouper.agent.plan import Connections, Rule, RuleKey, cgroup_keys, compose, plan_entries
from grouper.agent.registry import Event, Registry
from grouper.common.errors import ConfigError
from grouper.common.flows import host_flow_id
from grouper.common.queues import QueueConfig
from grouper.common.registration import Flow, JobEntry, reported_flows

log = logging.getLogger("grouper.agent")
CGROUP_GRACE = 1.0  # seconds a job's removed cgroup may take to be made again


class Kernel(Protocol):
    backend: str

    async def apply(self, rules: dict[RuleKey, Rule]) -> int: ...
    async def counters(self) -> dict[int, dict]: ...
    async def reload(self) -> None: ...


class EventHub:
    """Fan-out of stage events to every WatchEvents stream."""

    def __init__(self) -> None:
        self.subscribers: set[asyncio.Queue[Event]] = set()

    def subscribe(self) -> asyncio.Queue[Event]:
        q: asyncio.Queue[Event] = asyncio.Queue(maxsize=10000)
        self.subscribers.add(q)
        return q

    def unsubscribe(self, q: asyncio.Queue[Event]) -> None:
        self.subscribers.discard(q)

    def publish(self, events: list[Event]) -> None:
        for q in list(self.subscribers):
            for e in events:
                if q.full():
                    q.get_nowait()  # a slow watcher loses the oldest events, not the agent
                q.put_nowait(e)


class AgentCore:
    def __init__(
        self,
        host: str,
        registry: Registry,
        kernel: Kernel,
        queues: QueueConfig,
        addresses: dict[str, str],
        plan_ttl: float,
        metrics: AgentMetrics | None = None,
        tracker: Tracker | None = None,
        addresses6: dict[str, str] | None = None,
    ) -> None:
        self.host = host
        self.registry = registry
        self.kernel = kernel
        self.queues = queues
        self.addresses = addresses
        self.plan_ttl = plan_ttl
        self.metrics = metrics or AgentMetrics(host)
        self.rate = RateLimit(registry.policy.calls_per_second)  # per uid
        self.hub = EventHub()
        self.version = 0
        self.entries: dict[str, Rule] = {}  # the plan in force, by flow id
        self.plan_in_force: dict | None = None  # as the coordinator sent it, for deltas
        self.rules: dict[RuleKey, Rule] = {}  # what the kernel holds for it
        self.last_plan = 0.0
        self.priorities_active = False
        # jobs known by their processes: registered pids and descendants found since
        self.tracker = tracker
        self.procs: dict[JobKey, set[Proc]] = {}
        self.connections: Connections = {}
        self.destinations: dict[JobKey, set[str]] = {}  # hosts each job has connections to
        self.loads: dict[JobKey, LoadEstimate] = {}
        # bytes the job's connections sent, and of those, in the planned band and DSCP
        self.band_share: dict[JobKey, list[int]] = {}
        self._synced = -1  # registry generation self.procs reflects
        # jobs known by their cgroup (the registry checked each exists)
        self.addresses6 = addresses6 or {}
        self.cgroup_refs: dict[JobKey, CgroupRef] = {}
        self.watch: CgroupWatch | None = None  # inotify on the parents of jobs' cgroups

    # -- registry --------------------------------------------------------------------
    def registry_call(
        self, kind: str, data: Any, source: str = "grpc", caller: Caller = ROOT
    ) -> str:
        """Apply one registry call of ``caller``; returns "" or the error (naming the
        field and, for an ownership rule or a limit, the rule)."""
        handler = {
            "register": self.registry.register,
            "progress": self.registry.progress,
            "stage_finished": self.registry.stage_finished,
            "job_finished": self.registry.job_finished,
            "event": self.registry.apply_event,
        }[kind]
        try:
            self.rate.take(caller)
            events = handler(data, caller)
        except ConfigError as exc:
            self.metrics.input_errors.labels(self.host, source).inc()
            if isinstance(exc, Refusal):
                self.metrics.refusals.labels(self.host, exc.reason).inc()
            log.warning("refused %s from %s (%s): %s", kind, source, caller, exc)
            return str(exc)
        for e in events:
            log.info("%s %s/%s stage %d (%s)", e.kind.lower(), e.cojob_id, e.job_id, e.stage,
                     caller)  # fmt: skip
        self.hub.publish(events)
        self.metrics.jobs.labels(self.host).set(len(self.registry.active_jobs()))
        return ""

    # -- plans -----------------------------------------------------------------------
    async def apply_plan(self, plan: Any) -> tuple[bool, str, int]:
        """Validate and apply; on any error the plan in force stays. (ok, error, changed)"""
        if self._sync_procs() and self.tracker is not None:  # registered or ended since
            self._set_connections(self.tracker.connections())
        flows = self.registry.local_flows(self.host)
        try:
            version, entries = plan_entries(
                plan,
                host=self.host,
                in_force=self.version,
                flows=flows,
                addresses=self.addresses,
                queues=self.queues,
                finished=self.registry.finished_flows(self.host),
                finished_jobs=self.registry.finished_jobs(),
                discovered=set(self.procs) | set(self.cgroup_refs),
            )
        except ConfigError as exc:
            self.metrics.plans_refused.labels(self.host).inc()
            log.warning("refused plan: %s", exc)
            return False, str(exc), 0
        rules = self._compose(entries, flows)
        try:
            changed = await self.kernel.apply(rules)
        except Exception as exc:  # the kernel refused: keep the previous plan in force
            self.metrics.plans_refused.labels(self.host).inc()
            log.error("kernel refused plan %d: %s", version, exc)
            return False, f"kernel: {exc}", 0
        self.version, self.entries, self.rules = version, entries, rules
        self.plan_in_force = plan  # as it came: what the next delta patches
        self.last_plan = time.monotonic()
        if not self.priorities_active:
            log.info("priorities active (plan %d)", version)
        self.priorities_active = True
        log.info("plan %d in force: %d flows, %d kernel changes", version, len(rules), changed)
        self.metrics.plan_version.labels(self.host).set(version)
        self.metrics.priorities_active.labels(self.host).set(1)
        return True, "", changed

    async def check_ttl(self, now: float | None = None) -> bool:
        """Drop all priorities when no valid plan came within ``plan_ttl``."""
        now = time.monotonic() if now is None else now
        if not self.priorities_active or now - self.last_plan < self.plan_ttl:
            return False
        await self.kernel.apply({})
        self.rules, self.entries, self.plan_in_force = {}, {}, None
        self.priorities_active = False
        self.metrics.priorities_active.labels(self.host).set(0)
        log.warning("no plan for %.1fs (plan_ttl): dropped all priorities", now - self.last_plan)
        return True

    def _compose(self, entries: dict[str, Rule], flows: dict[str, Flow]) -> dict[RuleKey, Rule]:
        return compose(
            entries, flows, self.addresses, self.connections, self.cgroup_refs, self.addresses6
        )

    # -- jobs known by their processes or their cgroup -------------------------------
    def _sync_procs(self) -> bool:
        """Follow the registry: new participants in, finished jobs out (True if any)."""
        if self._synced == self.registry.generation:
            return False
        self._synced = self.registry.generation
        active = self.registry.active_jobs()
        live = {j.key: j for j in active if j.pids and not j.cgroup}
        joined = any(
            not {Proc(*p) for p in job.pids} <= self.procs.get(key, set())
            for key, job in live.items()
        )
        if joined and self.tracker is not None:  # a new job, or a new participant of one:
            self.tracker.forget_foreign()  # sockets of nobody may be its own
        gone = (set(self.procs) - set(live)) | self._sync_cgroups(active)
        for key in gone:
            self.procs.pop(key, None)
            self.loads.pop(key, None)
            if self.tracker is not None:
                self.tracker.drop_job(key)
        for key in [k for k in self.band_share if k not in self.registry.jobs]:
            del self.band_share[key]  # reaped: its tally goes with it
        for key, job in live.items():
            self.procs.setdefault(key, set()).update(Proc(*p) for p in job.pids)
        return bool(gone)

    def _sync_cgroups(self, active: list[JobEntry]) -> set[JobKey]:
        """Jobs known by their cgroup: new ones resolved, ended ones dropped (returned)."""
        cgroups = self.registry.cgroups
        want = {j.key: j.cgroup for j in active if j.cgroup}
        gone = set(self.cgroup_refs) - set(want)
        for key in gone:
            self._release(key, self.cgroup_refs.pop(key).path)
        new = [k for k in want if k not in self.cgroup_refs]
        if cgroups is None or not (gone or new):
            return gone  # a progress report, say: the same cgroups, nothing to walk
        vanished = set()
        for key in new:
            try:
                self.cgroup_refs[key] = cgroups.resolve(want[key])
            except ConfigError:  # removed since it registered
                vanished.add(key)
        self.hub.publish(self.registry.reap(vanished))
        if self.watch is not None:
            self.watch.watch_parents(cgroups.directory(r.path) for r in self.cgroup_refs.values())
        self._map_cgroup_ids()
        return gone

    def _release(self, key: JobKey, path: str) -> None:
        """A job that ended leaves no cgroup of ours behind."""
        job, made = self.registry.jobs.get(key), self.registry.job_cgroups
        if job is not None and job.own_cgroup and made is not None and not made.remove(path):
            log.warning("job %s/%s: could not remove its cgroup %s", *key, path)

    def release_cgroups(self) -> None:
        """The agent stops: the cgroups it made are removed, their processes moved back
        to where they came from (the jobs run on, unscheduled)."""
        for job in self.registry.active_jobs():
            self._release(job.key, job.cgroup)
        self.cgroup_refs.clear()

    def _map_cgroup_ids(self) -> None:
        """The tracker's cgroup id -> job map: each job's cgroup and those below it."""
        cgroups = self.registry.cgroups
        if self.tracker is None or cgroups is None:
            return
        ids = {i: k for k, ref in self.cgroup_refs.items() for i in cgroups.subtree_ids(ref)}
        self.tracker.set_cgroups(ids)

    async def cgroups_changed(self, grace: float = CGROUP_GRACE) -> None:
        """A cgroup was made or removed where jobs' cgroups live (inotify). A job's
        cgroup made again under its name within ``grace`` seconds (a restarted unit: a
        new id, which the rules loaded before do not match) gets the rules in force
        loaded again; a job whose cgroup stays gone ends."""
        cgroups = self.registry.cgroups
        if cgroups is None:
            return
        if not any(not cgroups.exists(r) for r in self.cgroup_refs.values()):
            return
        await asyncio.sleep(grace)
        ended, remade = set(), False
        for key, ref in list(self.cgroup_refs.items()):
            if cgroups.exists(ref):
                continue
            try:
                self.cgroup_refs[key] = cgroups.resolve(ref.path)
                remade = True
            except ConfigError:
                ended.add(key)
        events = self.registry.reap(ended)
        for e in events:
            log.info("job %s/%s: its cgroup was removed; finished", e.cojob_id, e.job_id)
        self.hub.publish(events)
        if remade:
            self._map_cgroup_ids()
            await self.kernel.reload()
            log.info("a job's cgroup was made again: rules reloaded")
        if ended:
            self._sync_procs()
            if self.priorities_active:
                flows = self.registry.local_flows(self.host)
                self.rules = self._compose(self.entries, flows)
                await self.kernel.apply(self.rules)

    async def discover(self, *, measure: bool = False) -> None:
        """One discovery round: new or closed connections of jobs, their rules in the
        kernel at once (with the plan in force). With ``measure``, also bytes sent, load
        estimates, and jobs whose processes all exited (finished here)."""
        if self.tracker is None:
            return
        dropped = self._sync_procs()
        if not (measure or self.procs or dropped):
            return  # jobs known by cgroup: the kernel classifies; counted once a second
        busy = self.procs or self.cgroup_refs or self.tracker.conns  # else nothing to do
        changed = self.tracker.refresh(self.procs, info=measure) if busy else set()
        if changed or dropped:
            before = set(self.connections)
            self._set_connections(self.tracker.connections())
            uncovered = {  # a host the plan in force has no entry for: ask for a replan
                j for j, h in self.connections.keys() - before
                if host_flow_id(*j, h) not in self.entries
            }  # fmt: skip
            flows_changed = [Event("FLOWS_CHANGED", j[0], j[1], 0) for j in sorted(uncovered)]
            if flows_changed:
                self.hub.publish(flows_changed)
            if self.priorities_active:
                flows = self.registry.local_flows(self.host)
                rules = self._compose(self.entries, flows)
                if rules != self.rules:
                    await self.kernel.apply(rules)
                    self.rules = rules
        if measure:
            if self.tracker.unknown_cgroup:  # a cgroup made below a job's, perhaps
                self._map_cgroup_ids()
            self._measure()
            exited = {k for k, ps in self.procs.items() if not any(alive(p) for p in ps)}
            events = self.registry.reap(exited)
            for e in events:
                log.info("job %s/%s: all its processes exited; finished", e.cojob_id, e.job_id)
            self.hub.publish(events)

    def _rule_of(self, job: JobKey, dst: str, key: RuleKey) -> Rule | None:
        """What the kernel holds for a connection of ``job`` to host ``dst``: its own
        rule, or for a job known by its cgroup, the cgroup's rule toward ``dst``."""
        ref = self.cgroup_refs.get(job)
        if ref is None:
            return self.rules.get(key)
        for key in cgroup_keys(ref, dst, self.addresses, self.addresses6):
            if key in self.rules:
                return self.rules[key]
        return None

    def _measure(self) -> None:
        assert self.tracker is not None
        for (job, dst, key), nbytes in self.tracker.take_sent().items():
            self.loads.setdefault(job, LoadEstimate()).add(dst, nbytes)
            # once the plan covers (job, host): was the connection in its planned band
            # and DSCP? (read once a second, so a second's bytes share one verdict)
            planned = self.entries.get(host_flow_id(*job, dst))
            if planned is not None:
                tally = self.band_share.setdefault(job, [0, 0])
                tally[0] += nbytes
                tally[1] += nbytes if self._rule_of(job, dst, key) == planned else 0
        for key, est in self.loads.items():
            entry = self.registry.jobs.get(key)
            if entry is not None and est.update(entry.iterations_done):
                self.registry.set_measured(key, est.reported())

    def _set_connections(self, connections: Connections) -> None:
        self.connections = connections
        self.destinations = {}
        for job, host in connections:
            self.destinations.setdefault(job, set()).add(host)

    def report_flows(self, job: JobEntry) -> list[Flow]:
        """Flows reported for ``job``: declared, or found from its processes."""
        if not (job.pids or job.cgroup) or self.tracker is None:
            return job.flows
        dests = self.destinations.get(job.key, set())
        return reported_flows(job, dests, self.host)

    # -- report ----------------------------------------------------------------------
    async def counters(self) -> dict[int, dict]:
        counters = await self.kernel.counters()
        self.metrics.set_counters(counters)
        return counters
