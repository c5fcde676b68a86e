"""The agent's logic, independent of gRPC: registry changes, plans, the plan TTL.

Daemons never crash on a bad message: every handler returns an error string instead of
raising, and the state in force stays as it was.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol

from agent.metrics import AgentMetrics
from agent.plan import Rule, RuleKey, desired_rules
from agent.registry import Event, Registry
from grouper.errors import ConfigError
from pda.priorities import QueueConfig

log = logging.getLogger("grouper.agent")


class Kernel(Protocol):
    backend: str

    async def apply(self, rules: dict[RuleKey, Rule]) -> int: ...
    async def counters(self) -> dict[int, dict]: ...


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
    ) -> None:
        self.host = host
        self.registry = registry
        self.kernel = kernel
        self.queues = queues
        self.addresses = addresses
        self.plan_ttl = plan_ttl
        self.metrics = metrics or AgentMetrics(host)
        self.hub = EventHub()
        self.version = 0
        self.rules: dict[RuleKey, Rule] = {}
        self.last_plan = 0.0
        self.priorities_active = False

    # -- registry --------------------------------------------------------------------
    def registry_call(self, kind: str, data: Any, source: str = "grpc") -> str:
        """Apply one registry call; returns "" or the error (naming the field)."""
        handler = {
            "register": self.registry.register,
            "progress": self.registry.progress,
            "stage_finished": self.registry.stage_finished,
            "job_finished": self.registry.job_finished,
            "event": self.registry.apply_event,
        }[kind]
        try:
            events = handler(data)
        except ConfigError as exc:
            self.metrics.input_errors.labels(self.host, source).inc()
            log.warning("refused %s from %s: %s", kind, source, exc)
            return str(exc)
        for e in events:
            log.info("%s %s/%s stage %d", e.kind.lower(), e.cojob_id, e.job_id, e.stage)
        self.hub.publish(events)
        self.metrics.jobs.labels(self.host).set(len(self.registry.active_jobs()))
        return ""

    # -- plans -----------------------------------------------------------------------
    async def apply_plan(self, plan: Any) -> tuple[bool, str, int]:
        """Validate and apply; on any error the plan in force stays. (ok, error, changed)"""
        try:
            version, rules = desired_rules(
                plan,
                host=self.host,
                in_force=self.version,
                flows=self.registry.local_flows(self.host),
                addresses=self.addresses,
                queues=self.queues,
                finished=self.registry.finished_flows(self.host),
            )
        except ConfigError as exc:
            self.metrics.plans_refused.labels(self.host).inc()
            log.warning("refused plan: %s", exc)
            return False, str(exc), 0
        try:
            changed = await self.kernel.apply(rules)
        except Exception as exc:  # the kernel refused: keep the previous plan in force
            self.metrics.plans_refused.labels(self.host).inc()
            log.error("kernel refused plan %d: %s", version, exc)
            return False, f"kernel: {exc}", 0
        self.version, self.rules = version, rules
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
        self.rules = {}
        self.priorities_active = False
        self.metrics.priorities_active.labels(self.host).set(0)
        log.warning("no plan for %.1fs (plan_ttl): dropped all priorities", now - self.last_plan)
        return True

    # -- report ----------------------------------------------------------------------
    async def counters(self) -> dict[int, dict]:
        counters = await self.kernel.counters()
        self.metrics.set_counters(counters)
        return counters
