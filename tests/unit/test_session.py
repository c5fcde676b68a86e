"""The Session stream between coordinator and agent (over loopback gRPC, fake core)."""

from __future__ import annotations

import asyncio

import grpc

from agent.service import AgentServicer
from coordinator.links import AgentLink, LinkError
from grouper.cluster_config import parse_cluster_config
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
        {
            "cluster": "s",
            "hosts": [
                {"name": "h1", "address": "10.0.0.1", "nic": "eth0", "agent": f"127.0.0.1:{port}"}
            ],
            "scheduling": {"period": 0.2},
        }
    )
    return AgentLink.open(cfg.hosts[0], cfg)


def test_session_answers_in_order_and_refuses_an_empty_request():
    async def run() -> list[pb.SessionReply]:
        server, port = await _server()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                call = pbg.AgentStub(ch).Session()
                plan = pb.SessionRequest(plan=pb.Plan(version=7, host="h1"))
                replies = []
                for req in (
                    pb.SessionRequest(collect=pb.CollectRequest()),
                    plan,
                    pb.SessionRequest(),
                ):
                    await call.write(req)
                    replies.append(await call.read())
                await call.done_writing()
                return replies
        finally:
            await server.stop(None)

    report, applied, empty = asyncio.run(run())
    assert report.report.host == "h1"
    assert applied.result.applied and applied.result.version == 7
    assert not empty.result.applied and "empty request" in empty.result.error


def test_link_reopens_its_session_after_the_agent_restarts():
    collect = pb.SessionRequest(collect=pb.CollectRequest())

    async def run() -> tuple[str, str, str]:
        server, port = await _server()
        link = _link(port)
        try:
            first = (await link.request(collect, 2.0)).report.host
            await server.stop(None)
            try:
                await link.request(collect, 2.0)
                down = "answered"
            except LinkError as exc:
                down = str(exc)
            server, _ = await _server(port)
            again = ""
            for _ in range(20):  # reconnect backoff is capped at one period (0.25 s here)
                try:
                    again = (await link.request(collect, 2.0)).report.host
                    break
                except LinkError:
                    await asyncio.sleep(0.1)
            return first, down, again
        finally:
            link.end_session()
            await link.channel.close()
            await server.stop(None)

    first, down, again = asyncio.run(run())
    assert first == "h1"
    assert down == "UNAVAILABLE"
    assert again == "h1"
