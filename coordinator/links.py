"""One coordinator-side link per agent: channel, session, liveness, what it acknowledged."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from grouper.common.cluster_config import ClusterConfig, HostConfig
from grouper.coordinator.delivery import PlanTrack
from grouper.coordinator.snapshot import JobReport
from grouper.coordinator.state import AgentState
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

log = logging.getLogger("grouper.coordinator")


def channel_for(host: HostConfig, cfg: ClusterConfig) -> grpc.aio.Channel:
    target = host.agent
    # gRPC backs off reconnects exponentially up to 2 minutes; an agent that restarts
    # must be re-synced within a couple of periods, so cap the backoff at one period
    backoff_ms = int(max(250, min(5000, cfg.scheduling.period * 1000)))
    options: list[tuple[str, Any]] = [
        ("grpc.initial_reconnect_backoff_ms", min(backoff_ms, 1000)),
        ("grpc.min_reconnect_backoff_ms", min(backoff_ms, 1000)),
        ("grpc.max_reconnect_backoff_ms", backoff_ms),
    ]
    if cfg.tls is None:
        return grpc.aio.insecure_channel(target, options=options)
    creds = grpc.ssl_channel_credentials(
        root_certificates=Path(cfg.tls.ca).read_bytes(),
        private_key=Path(cfg.tls.key).read_bytes(),
        certificate_chain=Path(cfg.tls.cert).read_bytes(),
    )
    # the agent's certificate must name its configured host
    options.append(("grpc.ssl_target_name_override", host.name))
    return grpc.aio.secure_channel(target, creds, options=options)


class LinkError(Exception):
    """The agent did not answer: the gRPC status name, or why the session ended."""


def _why(exc: Exception) -> str:
    if isinstance(exc, grpc.aio.AioRpcError):
        return exc.code().name
    if isinstance(exc, asyncio.InvalidStateError):  # written to a stream that had ended
        return "session ended"
    return str(exc)


OnUpdate = Callable[["AgentLink", pb.StateUpdate], str]
OnDown = Callable[["AgentLink", str], None]


@dataclass
class AgentLink:
    """One agent's session: state updates in (``serve``), plans out (``apply``)."""

    host: HostConfig
    channel: grpc.aio.Channel
    stub: pbg.AgentStub
    state: AgentState
    up: bool = False
    last_ok: float = -math.inf  # when its last update was applied
    heard_deaf: float = 0.0  # the coordinator's stalls until then (``StallClock.deaf``)
    track: PlanTrack = field(default_factory=PlanTrack)  # plans sent and confirmed
    call: grpc.aio.StreamStreamCall | None = None
    pending: deque[asyncio.Future] = field(default_factory=deque)
    write_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # results nobody waits for (plans acknowledged by update that were not applied)
    on_result: Callable[[AgentLink, pb.ApplyResult], None] | None = None

    @classmethod
    def open(cls, host: HostConfig, cfg: ClusterConfig) -> AgentLink:
        ch = channel_for(host, cfg)
        return cls(host, ch, pbg.AgentStub(ch), AgentState(host.name))

    @property
    def metadata(self) -> tuple[tuple[str, str], ...]:
        """Every call names the host it is meant for (agents and audits can check)."""
        return (("x-grouper-host", self.host.name),)

    @property
    def jobs(self) -> list[JobReport]:
        return self.state.reports()

    async def serve(self, sync: pb.SyncRequest, on_update: OnUpdate, on_down: OnDown,
                    retry: float) -> None:  # fmt: skip
        """Keep the session open until cancelled: connect, sync, then merge updates as
        they come; a gap asks for a full update; a broken stream is reopened after
        ``retry`` seconds (and the state held waits for the new stream's full update)."""
        while True:
            call = self.stub.Session(metadata=self.metadata)
            self.call = call
            self.state.reset()
            try:
                await self._write(call, pb.SessionRequest(sync=sync))
                asked = time.monotonic()
                while True:
                    reply = await call.read()
                    if reply is grpc.aio.EOF:
                        raise LinkError("session ended by the agent")
                    if reply.HasField("result"):
                        self._resolve(reply.result)
                        continue
                    if not reply.HasField("update"):
                        continue
                    verdict = on_update(self, reply.update)
                    # a gap, or still no full update a heartbeat after asking (lost too)
                    waited = self.state.awaiting_full and time.monotonic() - asked > sync.heartbeat
                    if verdict == "gap" or waited:
                        held = pb.SyncRequest()
                        held.CopyFrom(sync)
                        held.epoch, held.seq = self.state.epoch, self.state.seq
                        await self._write(call, pb.SessionRequest(sync=held))
                        asked = time.monotonic()
            except (grpc.aio.AioRpcError, asyncio.InvalidStateError, LinkError) as exc:
                on_down(self, _why(exc))
            finally:
                self.end_session()
            await asyncio.sleep(retry)

    def _resolve(self, result: pb.ApplyResult) -> None:
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():  # a plan that timed out gave up on its result
                fut.set_result(result)
                return
        if self.on_result is not None:
            self.on_result(self, result)

    async def post(self, plan: pb.SessionRequest) -> None:
        """Write a plan on the open session without waiting for anything back."""
        call = self.call
        if call is None:
            raise LinkError("no session")
        try:
            async with self.write_lock:
                await call.write(plan)
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            raise LinkError(_why(exc)) from exc

    async def _write(self, call: grpc.aio.StreamStreamCall, req: pb.SessionRequest) -> None:
        async with self.write_lock:
            await call.write(req)

    async def apply(self, plan: pb.SessionRequest, timeout: float) -> pb.ApplyResult:
        """Send a plan on the open session and wait for its result."""
        call = self.call
        if call is None:
            raise LinkError("no session")
        fut = asyncio.get_running_loop().create_future()
        try:
            async with asyncio.timeout(timeout):
                async with self.write_lock:
                    self.pending.append(fut)  # results come back in the order plans went
                    await call.write(plan)
                return await fut
        except TimeoutError as exc:
            self.end_session()  # a stuck stream: the session is reopened
            raise LinkError("DEADLINE_EXCEEDED") from exc
        except (grpc.aio.AioRpcError, asyncio.InvalidStateError) as exc:
            raise LinkError(_why(exc)) from exc

    def end_session(self) -> None:
        if self.call is not None:
            self.call.cancel()
            self.call = None
        while self.pending:
            fut = self.pending.popleft()
            if not fut.done():
                fut.set_exception(LinkError("session ended"))

    def age_out(self, timeout: float, silent: float) -> bool:
        """Forget the jobs of an agent ``silent`` for more than ``timeout``; True when it
        just happened."""
        if self.state.jobs and silent > timeout:
            log.warning("agent %s silent for %.1fs: its stages age out", self.host.name, timeout)
            self.state.clear()
            return True
        return False
