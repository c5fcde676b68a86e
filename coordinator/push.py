"""Pushing a cycle's plans over the agents' sessions (see ``coordinator.delivery``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from grouper.coordinator.links import AgentLink, LinkError
from grouper.coordinator.metrics import CoordinatorMetrics
from grouper.coordinator.planner import HostPlan, PlanPatch
from grouper.coordinator.trace import CycleTrace
from grouper.v1 import agent_pb2 as pb

log = logging.getLogger("grouper.coordinator")

# Plan writes awaited together. One at a time, each write waits for gRPC's poller
# thread to complete it; together those waits overlap: at 3,000 agents the deliver
# step took 0.56 s one at a time, 0.23-0.25 s 256 or 1,024 at a time, 0.27 s all at
# once (docs/explanation/coordinator.md).
WRITES_IN_FLIGHT = 1024


class Pusher:
    """Sends plans; with ``quiet`` (acknowledged by the agents' next updates) a push
    ends when the plan is written, else when its result came."""

    def __init__(
        self,
        metrics: CoordinatorMetrics,
        mark_down: Callable[[AgentLink, str], None],
        rpc_timeout: float,
        quiet: bool = True,
    ) -> None:
        self.metrics = metrics
        self.mark_down = mark_down
        self.rpc_timeout = rpc_timeout
        self.quiet = quiet
        self.trace: CycleTrace | None = None
        self.repairs: set[asyncio.Task] = set()

    @property
    def waits(self) -> bool:
        """Results are waited for: always when tracing (they carry the agent's stamps)."""
        return not self.quiet or self.trace is not None

    async def push_all(
        self, todo: list[tuple[AgentLink, HostPlan]], patches: dict[str, PlanPatch] | None = None
    ) -> int:
        """Push each link its plan; how many went (quiet) or were applied. ``patches``:
        the hosts' plans patched from their last (``planner.Planned.patched``)."""
        get = (patches or {}).get
        if not self.waits:  # written, not waited for: WRITES_IN_FLIGHT at a time
            sent = 0
            for i in range(0, len(todo), WRITES_IN_FLIGHT):
                chunk = todo[i : i + WRITES_IN_FLIGHT]
                sent += sum(
                    await asyncio.gather(*(self.post(lk, p, get(lk.host.name)) for lk, p in chunk))
                )
            return sent
        return sum(await asyncio.gather(*(self.push(lk, p, get(lk.host.name)) for lk, p in todo)))

    async def post(self, link: AgentLink, plan: HostPlan, patch: PlanPatch | None = None) -> bool:
        whole = link.track.whole_next or link.track.sent is None
        msg = link.track.message(link.host.name, plan, time.monotonic(), True, patch)
        try:
            await link.post(msg)
        except LinkError as exc:
            self.mark_down(link, str(exc))
            return False
        self.metrics.plans_pushed.labels("whole" if whole else "delta").inc()
        return True

    def on_result(self, link: AgentLink, res: pb.ApplyResult) -> None:
        """A result nobody waited for: an acknowledgement (agents that answer every
        plan), or a plan the agent did not apply."""
        verdict = link.track.on_result(res)
        if verdict == "ok":
            return
        if verdict == "refused":
            self.metrics.errors.labels("plan_refused").inc()
            log.error("agent %s refused plan %d: %s", link.host.name, res.answers, res.error)
            return
        plan = link.track.sent
        log.info("agent %s: %s; sending plan %d whole", link.host.name, res.error,
                 link.track.next_version())  # fmt: skip
        if plan is not None and not self.waits:  # else the next cycle sends it whole
            task = asyncio.ensure_future(self.post(link, plan))
            self.repairs.add(task)
            task.add_done_callback(self.repairs.discard)

    async def _send(
        self, link: AgentLink, plan: HostPlan, patch: PlanPatch | None = None
    ) -> pb.ApplyResult | None:
        msg = link.track.message(link.host.name, plan, time.monotonic(), False, patch)
        sent = time.time()
        try:
            res = await link.apply(msg, self.rpc_timeout)
        except LinkError as exc:
            self.mark_down(link, str(exc))
            return None
        if self.trace is not None and res.applied:
            self.trace.push(link.host.name, msg.plan.version, sent, res)
        return res

    async def push(self, link: AgentLink, plan: HostPlan, patch: PlanPatch | None = None) -> bool:
        """Send ``plan`` and wait for its result (a delta on the plan the agent
        confirmed, else whole; a delta refused with need_full goes again whole)."""
        whole = not link.track.confirmed or link.track.whole_next
        res = await self._send(link, plan, patch)
        verdict = "ok" if res is None else link.track.on_result(res)
        if res is not None and verdict == "whole":
            log.info("agent %s: %s; sending plan %d whole", link.host.name, res.error,
                     link.track.next_version())  # fmt: skip
            whole = True
            res = await self._send(link, plan)
            verdict = "ok" if res is None else link.track.on_result(res)
        if res is None:
            return False
        if not res.applied:
            self.metrics.errors.labels("plan_refused").inc()
            log.error("agent %s refused plan %d: %s", link.host.name, link.track.pushed_version,
                      res.error)  # fmt: skip
            return False
        self.metrics.plans_pushed.labels("whole" if whole else "delta").inc()
        return True
