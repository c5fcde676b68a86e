"""The agent's two gRPC doors as the kernel tests call them: the Registry (jobs) and the
Agent API (the coordinator)."""

from __future__ import annotations

import grpc

from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from tests.netns import AgentProc


def register(agent: AgentProc, cojob: str, ports: list[int], dst: str = "b") -> None:
    with grpc.insecure_channel(f"unix:{agent.registry}") as ch:
        ack = pbg.RegistryStub(ch).RegisterJob(
            pb.JobRegistration(
                cojob_id=cojob,
                job_id="j1",
                arch="flows",
                stage_iterations=[10, 20],
                flows=[
                    pb.FlowSpec(src_host="a", dst_host=dst, dst_port=p, bytes_per_iteration=1e6)
                    for p in ports
                ],
            ),
            timeout=5,
        )
    assert ack.ok, ack.error


def apply(
    agent: AgentProc,
    version: int,
    flows: list[tuple[str, int, int]],
    inbound: list[tuple[str, int]] = (),
) -> pb.ApplyResult:
    with grpc.insecure_channel(f"unix:{agent.api}") as ch:
        return pbg.AgentStub(ch).ApplyPlan(
            pb.Plan(
                version=version,
                host="a",
                flows=[pb.FlowPriority(flow_id=f, band=b, dscp=d) for f, b, d in flows],
                inbound=[pb.Inbound(src_host=h, port=p) for h, p in inbound],
            ),
            timeout=5,
        )


def collect(agent: AgentProc) -> pb.HostReport:
    with grpc.insecure_channel(f"unix:{agent.api}") as ch:
        return pbg.AgentStub(ch).Collect(pb.CollectRequest(), timeout=5)
