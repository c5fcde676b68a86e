"""Mutual TLS between coordinator and agent: the agent's certificate must name its host."""

from __future__ import annotations

import asyncio

import grpc
import pytest

from grouper.agent.service import AgentServicer
from grouper.common.cluster_config import parse_cluster_config
from grouper.common.cluster_doc import cluster_doc
from grouper.coordinator.loop import Coordinator
from grouper.v1 import agent_pb2_grpc as pbg
from tests.pki import make_pki
from tests.unit.helpers import FakeCore


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"), ("h1", "coordinator"))


async def scenario(pki, configured_name: str) -> bool:
    server, port = await agent_server(pki, AgentServicer(FakeCore(configured_name)))
    cfg = parse_cluster_config(
        cluster_doc(
            [(configured_name, "10.0.0.1", "eth0", None, f"127.0.0.1:{port}")],
            cluster="tls",
            tls={
                "ca": str(pki / "ca.pem"),
                "cert": str(pki / "coordinator.pem"),
                "key": str(pki / "coordinator.key"),
            },
        )
    )
    coord = Coordinator(cfg, rpc_timeout=3.0)
    try:
        coord.start_sessions()
        await coord.wait_synced(3.0)
        stats = await coord.cycle()
        return stats.agents_up == 1
    finally:
        await coord.close()
        await server.stop(None)


def test_agent_with_matching_certificate_is_served(pki):
    assert asyncio.run(scenario(pki, "h1"))


def test_agent_whose_certificate_names_another_host_is_refused(pki):
    # the process at this address holds h1's certificate but is configured as h2
    assert not asyncio.run(scenario(pki, "h2"))


async def agent_server(pki, servicer) -> tuple:
    """An agent API server holding h1's certificate that requires a client certificate."""
    server = grpc.aio.server()
    pbg.add_AgentServicer_to_server(servicer, server)
    port = server.add_secure_port(
        "127.0.0.1:0",
        grpc.ssl_server_credentials(
            [((pki / "h1.key").read_bytes(), (pki / "h1.pem").read_bytes())],
            root_certificates=(pki / "ca.pem").read_bytes(),
            require_client_auth=True,
        ),
    )
    await server.start()
    return server, port


def test_client_without_certificate_is_refused(pki):
    async def run() -> None:
        server, port = await agent_server(pki, AgentServicer(FakeCore("h1")))
        try:
            creds = grpc.ssl_channel_credentials((pki / "ca.pem").read_bytes())
            async with grpc.aio.secure_channel(
                f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", "h1")]
            ) as ch:
                from grouper.v1 import agent_pb2 as pb

                with pytest.raises(grpc.aio.AioRpcError):
                    await pbg.AgentStub(ch).Collect(pb.CollectRequest(), timeout=3)
        finally:
            await server.stop(None)

    asyncio.run(run())


class PlanCore(FakeCore):
    def __init__(self, host):
        from grouper.agent.core import EventHub

        super().__init__(host)
        self.hub = EventHub()

    async def apply_plan(self, plan):
        self.version = plan["version"]
        return True, "", 0


async def call_as(pki, identity: str) -> dict[str, str]:
    """Each call of the Agent API made with ``identity``'s (validly signed) certificate
    against an agent that takes plans from "coordinator" only: "ok" or the status."""
    from grouper.agent.authz import coordinator_only
    from grouper.v1 import agent_pb2 as pb

    servicer = AgentServicer(PlanCore("h1"), coordinator_only("coordinator"))
    server, port = await agent_server(pki, servicer)
    creds = grpc.ssl_channel_credentials(
        root_certificates=(pki / "ca.pem").read_bytes(),
        private_key=(pki / f"{identity}.key").read_bytes(),
        certificate_chain=(pki / f"{identity}.pem").read_bytes(),
    )
    out = {}
    try:
        async with grpc.aio.secure_channel(
            f"127.0.0.1:{port}", creds, options=[("grpc.ssl_target_name_override", "h1")]
        ) as ch:
            stub = pbg.AgentStub(ch)
            calls = {
                "Collect": lambda: stub.Collect(pb.CollectRequest(), timeout=3),
                "ApplyPlan": lambda: stub.ApplyPlan(pb.Plan(version=1, host="h1"), timeout=3),
            }
            for name, call in calls.items():
                try:
                    await call()
                    out[name] = "ok"
                except grpc.aio.AioRpcError as exc:
                    out[name] = f"{exc.code().name}: {exc.details()}"
            session = stub.Session(timeout=3)
            try:
                await session.write(pb.SessionRequest(plan=pb.Plan(version=2, host="h1")))
                await session.read()
                out["Session plan"] = "ok"
            except grpc.aio.AioRpcError as exc:
                out["Session plan"] = f"{exc.code().name}: {exc.details()}"
            watch = stub.WatchEvents(pb.WatchRequest(), timeout=1)
            try:
                async for _ in watch:
                    break
                out["WatchEvents"] = "ok"
            except grpc.aio.AioRpcError as exc:
                code = exc.code().name
                out["WatchEvents"] = (
                    "ok" if code == "DEADLINE_EXCEEDED" else f"{code}: {exc.details()}"
                )
    finally:
        await server.stop(None)
    return out


def test_only_the_coordinators_certificate_may_push_plans_or_watch(pki, caplog):
    agent_cert = asyncio.run(call_as(pki, "h1"))  # a valid agent certificate of the CA
    assert agent_cert["Collect"] == "ok", "reports stay readable by cluster members"
    for call in ("ApplyPlan", "Session plan", "WatchEvents"):
        assert agent_cert[call].startswith("PERMISSION_DENIED: "), agent_cert
        assert "h1 is not the coordinator 'coordinator'" in agent_cert[call]
    assert "refused ApplyPlan from h1" in caplog.text, "the refusal is logged with the caller"
    coordinator = asyncio.run(call_as(pki, "coordinator"))
    assert coordinator == {c: "ok" for c in ("Collect", "ApplyPlan", "Session plan", "WatchEvents")}
