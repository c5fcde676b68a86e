"""The Session stream between coordinator and agent (over loopback gRPC, fake core)."""

from __future__ import annotations

import asyncio

import grpc

from grouper.agent.service import AgentServicer
from grouper.common.cluster_config import parse_cluster_config
from grouper.common.cluster_doc import cluster_doc
from grouper.coordinator.links import AgentLink
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from tests.unit.helpers import FakeCore


async def _server(port: int = 0) -> tuple[grpc.aio.Server, int]:
    server = grpc.aio.server()
    pbg.add_AgentServicer_to_server(AgentServicer(FakeCore("h1")), server)
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server, port


def _link(port: int) -> AgentLink:
    cfg = parse_cluster_config(
        cluster_doc(
            [("h1", "10.0.0.1", "eth0", None, f"127.0.0.1:{port}")],
            cluster="s",
            scheduling={"period": 0.2},
        )
    )
    return AgentLink.open(cfg.hosts[0], cfg)


def test_session_answers_a_sync_with_a_full_update_and_plans_in_order():
    async def run() -> list[pb.SessionReply]:
        server, port = await _server()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                call = pbg.AgentStub(ch).Session()
                plan = pb.SessionRequest(plan=pb.Plan(version=7, host="h1"))
                replies = []
                for req in (
                    pb.SessionRequest(sync=pb.SyncRequest(interval=5, heartbeat=5)),
                    plan,
                    pb.SessionRequest(),
                ):
                    await call.write(req)
                    replies.append(await call.read())
                await call.done_writing()
                return replies
        finally:
            await server.stop(None)

    full, applied, empty = asyncio.run(run())
    assert full.update.host == "h1" and full.update.full and full.update.seq == 1
    assert full.update.epoch != 0
    assert applied.result.applied and applied.result.version == 7
    assert not empty.result.applied and "empty request" in empty.result.error


def test_link_reopens_its_session_after_the_agent_restarts():
    """The link syncs on every new stream; a restarted agent answers with a new epoch."""

    async def run() -> tuple[list[tuple[int, bool]], list[str]]:
        server, port = await _server()
        link = _link(port)
        updates: list[tuple[int, bool]] = []
        downs: list[str] = []

        def on_update(lk: AgentLink, up: pb.StateUpdate) -> str:
            updates.append((up.epoch, up.full))
            return lk.state.apply(up, {"h1"})[0]

        sync = pb.SyncRequest(interval=0.05, heartbeat=0.1)
        task = asyncio.create_task(link.serve(sync, on_update, lambda lk, why: downs.append(why),
                                              0.1))  # fmt: skip
        try:
            for _ in range(50):
                await asyncio.sleep(0.05)
                if updates:
                    break
            await server.stop(None)
            server, _ = await _server(port)
            first = updates[0][0]
            for _ in range(60):  # reconnect backoff is capped at one period (0.25 s here)
                await asyncio.sleep(0.05)
                if any(e != first for e, _ in updates):
                    break
            return updates, downs
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await link.channel.close()
            await server.stop(None)

    updates, downs = asyncio.run(run())
    first = updates[0][0]
    assert updates[0][1], "a new session starts with a full update"
    assert downs and downs[0] in ("UNAVAILABLE", "CANCELLED", "session ended by the agent")
    restarted = [full for epoch, full in updates if epoch != first]
    assert restarted and restarted[0], "the restarted agent's first update is a full one"


def test_plans_queued_behind_an_event_are_answered_in_their_order():
    """An event is sent at once with any events queued after it; a plan found behind it
    keeps its turn, so results go back in the order plans came."""
    from grouper.agent.registry import Event
    from grouper.agent.session import AgentSession, stage_event
    from grouper.agent.updates import UpdateSource

    class Context:
        def __init__(self) -> None:
            self.out: list[pb.SessionReply] = []

        async def read(self):
            return grpc.aio.EOF

        async def write(self, msg: pb.SessionReply) -> None:
            self.out.append(msg)

    async def apply(plan: pb.Plan, ctx) -> pb.ApplyResult:
        return pb.ApplyResult(applied=True, version=plan.version)

    async def run() -> list[str]:
        core = FakeCore("h1")
        session = AgentSession(core, UpdateSource("h1", 5), lambda: {}, apply)
        session.source.full({}, 0, False)  # synced
        ev = stage_event("h1", Event("STAGE_FINISHED", "C", "j", 1))
        for item in [("event", ev), ("plan", pb.Plan(version=1)), ("event", ev),
                     ("plan", pb.Plan(version=2))]:  # fmt: skip
            session.inbox.put_nowait(item)
        ctx = Context()
        await session.run(ctx)
        return [
            f"update:{len(m.update.events)}" if m.HasField("update") else f"plan:{m.result.version}"
            for m in ctx.out
        ]

    assert asyncio.run(run()) == ["update:1", "plan:1", "update:1", "plan:2"]


def test_a_sync_sets_the_progress_step_within_bounds():
    """The coordinator's ``progress_step`` reaches the agent's update source with its
    sync (clamped to [0, MAX_PROGRESS_STEP]); a sync without one reports every change."""
    from grouper.agent.session import AgentSession
    from grouper.agent.updates import UpdateSource
    from grouper.common.progress import MAX_PROGRESS_STEP

    async def steps() -> list[float]:
        session = AgentSession(FakeCore("h1"), UpdateSource("h1", 5), lambda: {}, None)
        out = []
        for step in (0.05, 7.0, -1.0, None):
            sync = pb.SyncRequest(interval=0.5) if step is None else pb.SyncRequest(
                interval=0.5, progress_step=step)  # fmt: skip
            replies = await session._handle("sync", sync, None)
            assert replies[0].update.full
            out.append(session.source.step)
        return out

    assert asyncio.run(steps()) == [0.05, MAX_PROGRESS_STEP, 0.0, 0.0]


def test_a_sync_says_whether_known_jobs_progress_by_key():
    """``jobs_by_key`` in the coordinator's sync reaches the update source: a later
    coordinator's sync without it (an older one) gets every job state whole again."""
    from grouper.agent.session import AgentSession
    from grouper.agent.updates import UpdateSource

    async def flags() -> list[bool]:
        session = AgentSession(FakeCore("h1"), UpdateSource("h1", 5), lambda: {}, None)
        out = []
        for by_key in (True, False):
            await session._handle("sync", pb.SyncRequest(interval=0.5, jobs_by_key=by_key), None)
            out.append(session.source.by_key)
        return out

    assert asyncio.run(flags()) == [True, False]
