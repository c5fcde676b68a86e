"""The agent's end of the coordinator's Session stream.

Requests (syncs and plans) are read by one task; everything the agent writes goes
through one loop, in order: a plan's result (for a plan acknowledged by update, only
when it was not applied: the next update, due within ``interval``, carries the new
version), a full update after a sync, a delta at once
when stage events happened, else at most every ``interval`` when progress changed, and
an empty one every ``heartbeat`` so the coordinator knows the agent is alive.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from grouper.agent.registry import Event
from grouper.agent.updates import UpdateSource
from grouper.common.progress import MAX_PROGRESS_STEP
from grouper.v1 import agent_pb2 as pb

log = logging.getLogger("grouper.agent")

MIN_INTERVAL = 0.01  # a coordinator cannot ask for more than 100 updates a second


class AgentSession:
    def __init__(
        self,
        core: Any,
        source: UpdateSource,
        job_states: Callable[[], dict[tuple[str, str], pb.JobState]],
        apply: Callable[[pb.Plan, Any], Awaitable[pb.ApplyResult]],
    ) -> None:
        self.core = core
        self.source = source
        self.job_states = job_states
        self.apply = apply
        # bounded: a caller writing faster than plans apply is held back by gRPC's flow
        # control instead of growing this queue
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue(maxsize=256)
        self.interval = 1.0
        self.heartbeat = 10.0
        self.last_sent = time.monotonic()
        self.next: tuple[str, Any] | None = None  # taken from the inbox, handled next

    async def run(self, context: grpc.aio.ServicerContext) -> None:
        events = self.core.hub.subscribe()
        tasks = [
            asyncio.create_task(self._read(context)),
            asyncio.create_task(self._forward(events)),
        ]
        try:
            while True:
                if self.next is not None:
                    (kind, item), self.next = self.next, None
                else:
                    try:
                        async with asyncio.timeout(self._timeout()):
                            kind, item = await self.inbox.get()
                    except TimeoutError:
                        kind, item = "tick", None
                if kind == "end":
                    return
                for out in await self._handle(kind, item, context):
                    await context.write(out)
                    self.last_sent = time.monotonic()
        finally:
            self.core.hub.unsubscribe(events)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _timeout(self) -> float | None:
        if not self.source.synced:
            return None
        due = min(self.last_sent + self.heartbeat, time.monotonic() + self.interval)
        return max(0.0, due - time.monotonic())

    async def _handle(self, kind: str, item: Any, context: Any) -> list[pb.SessionReply]:
        core = self.core
        if kind == "sync":
            self.interval = max(MIN_INTERVAL, item.interval or 1.0)
            self.heartbeat = max(self.interval, item.heartbeat or 10.0)
            self.source.step = min(max(item.progress_step, 0.0), MAX_PROGRESS_STEP)
            self.source.by_key = item.jobs_by_key
            if (item.epoch, item.seq) != (self.source.epoch, self.source.seq):
                log.info("coordinator resyncs (it holds update %d of epoch %x)", item.seq,
                         item.epoch)  # fmt: skip
            up = self.source.full(self.job_states(), core.version, core.priorities_active)
            return [pb.SessionReply(update=up)]
        if kind == "plan":
            res = await self.apply(item, context)
            if item.ack_by_update and res.applied:
                # acknowledged by the next update (its plan_version): within one
                # interval, since the version in force changed (``UpdateSource.delta``)
                return []
            return [pb.SessionReply(result=res)]
        if kind == "bad":
            return [pb.SessionReply(result=pb.ApplyResult(
                applied=False, version=core.version, error="session: empty request"))]  # fmt: skip
        if not self.source.synced:
            return []  # nothing to diff against until the coordinator said what it holds
        evs = [item] if kind == "event" else []
        while kind == "event" and not self.inbox.empty():  # one update for a burst
            k2, i2 = self.inbox.get_nowait()
            if k2 != "event":
                self.next = (k2, i2)  # keeps its turn: right after this update
                break
            evs.append(i2)
        beat = time.monotonic() - self.last_sent >= self.heartbeat
        up = self.source.delta(
            self.job_states(), core.version, core.priorities_active, evs, heartbeat=beat
        )
        return [] if up is None else [pb.SessionReply(update=up)]

    async def _read(self, context: grpc.aio.ServicerContext) -> None:
        try:
            while True:
                req = await context.read()
                if req is grpc.aio.EOF:
                    break
                kind = req.WhichOneof("request")
                await self.inbox.put((kind or "bad", getattr(req, kind) if kind else None))
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError):
            pass
        finally:
            await self.inbox.put(("end", None))

    async def _forward(self, events: asyncio.Queue) -> None:
        while True:
            e = await events.get()
            await self.inbox.put(("event", stage_event(self.core.host, e)))


def stage_event(host: str, e: Event) -> pb.StageEvent:
    """A registry event as the coordinator and watchers see it."""
    return pb.StageEvent(
        host=host,
        cojob_id=e.cojob_id,
        job_id=e.job_id,
        stage=e.stage,
        kind=pb.StageEvent.Kind.Value(e.kind),
        time=e.time,
    )
