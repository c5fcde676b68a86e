"""``grouper bench coordinator``: one full cycle against 1,000 agents over loopback gRPC.

The agents are virtual: one in-process gRPC server answers for all of them, told apart
by the ``x-grouper-host`` header the coordinator sends, over the same Session streams
the coordinator keeps to real agents. Their reports are serialized once up front, so
the time measured is mostly the coordinator's (the fleet shares its process and
cores): collect (1,000 concurrent requests, parsing and validating reports), order
(merge, PDA, mapping) and push (1,000 concurrent plans). Every run forces a push to
every agent.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

import grpc

from common.errors import ConfigError
from common.output import write_json
from coordinator.loop import Coordinator
from grouper.cluster_config import parse_cluster_config
from grouper.v1 import agent_pb2 as pb
from workloads.random_instance import random_cojobs


def fleet_reports(hosts: int, stages: int, seed: int) -> dict[str, bytes]:
    names, cojobs = random_cojobs(hosts, stages, seed)
    per_host: dict[str, list[pb.JobState]] = {h: [] for h in names}
    for cj in cojobs:
        for job in cj.jobs:
            by_src: dict[str, list[pb.FlowSpec]] = {}
            for k, f in enumerate(job.flows):
                if f.src != f.dst:
                    by_src.setdefault(f.src, []).append(
                        pb.FlowSpec(
                            src_host=f.src,
                            dst_host=f.dst,
                            dst_port=20000 + k,
                            bytes_per_iteration=f.bytes,
                        )
                    )
            for src, flows in by_src.items():
                per_host[src].append(
                    pb.JobState(
                        job=pb.JobRegistration(
                            cojob_id=cj.cojob_id,
                            job_id=job.job_id,
                            arch="flows",
                            stage_iterations=list(cj.stage_iterations),
                            arrival=1.0 + len(per_host),
                            flows=flows,
                        )
                    )
                )
    return {
        h: pb.HostReport(host=h, jobs=jobs, backend="htb").SerializeToString()
        for h, jobs in per_host.items()
    }


class Fleet:
    """Answers for every virtual agent; replies to collects are serialized up front."""

    def __init__(self, reports: dict[str, bytes]) -> None:
        self.replies = {
            h: pb.SessionReply(report=pb.HostReport.FromString(r)).SerializeToString()
            for h, r in reports.items()
        }
        self.plans = 0

    async def session(self, requests: Any, context: Any) -> Any:
        host = dict(context.invocation_metadata())["x-grouper-host"]
        async for raw in requests:
            req = pb.SessionRequest.FromString(raw)
            if req.HasField("plan"):
                self.plans += 1
                yield pb.SessionReply(
                    result=pb.ApplyResult(applied=True, version=req.plan.version)
                ).SerializeToString()
            else:
                yield self.replies[host]

    def handler(self) -> grpc.GenericRpcHandler:
        ident = lambda b: b  # noqa: E731 - raw bytes in and out
        return grpc.method_handlers_generic_handler(
            "grouper.v1.Agent",
            {"Session": grpc.stream_stream_rpc_method_handler(self.session, ident, ident)},
        )


async def _run(agents: int, stages: int, seed: int, runs: int) -> dict:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8 * agents + 1024)), hard))
    reports = fleet_reports(agents, stages, seed)
    fleet = Fleet(reports)
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((fleet.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    cfg = parse_cluster_config(
        {
            "cluster": "bench",
            "hosts": [
                {
                    "name": h,
                    "address": f"10.{i // 250}.{i % 250}.1",
                    "nic": "eth0",
                    "agent": f"127.0.0.1:{port}",
                }
                for i, h in enumerate(reports)
            ],
            "failure": {"agent_timeout": 60, "plan_ttl": 600},
        }
    )
    coord = Coordinator(cfg, rpc_timeout=30.0)
    try:
        await coord.cycle("warmup")  # connects 1,000 channels
        stats = []
        for _ in range(runs):
            for link in coord.links.values():
                link.acked = None
            stats.append(await coord.cycle("bench"))
    finally:
        await coord.close()
        await server.stop(None)
    med = sorted(stats, key=lambda s: s.total_s)[len(stats) // 2]
    return {
        "seconds": statistics.median(s.total_s for s in stats),
        "collect_seconds": med.collect_s,
        "order_seconds": med.order_s,
        "push_seconds": med.push_s,
        "share": {
            "collect": med.collect_s / med.total_s,
            "order": med.order_s / med.total_s,
            "push": med.push_s / med.total_s,
        },
        "agents": agents,
        "agents_up": med.agents_up,
        "stages": med.stages,
        "plans_pushed": med.pushed,
        "runs": [s.total_s for s in stats],
    }


def bench_coordinator(agents: int, stages: int, seed: int, runs: int, json_path: str | None) -> int:
    if agents < 2:
        raise ConfigError("--agents", f"must be at least 2, got {agents}")
    result = asyncio.run(_run(agents, stages, seed, max(runs, 3)))
    write_json(result, json_path)
    if json_path != "-":
        s = result["share"]
        print(
            f"coordinator cycle, {agents} agents, {result['stages']} stages: "
            f"{result['seconds'] * 1e3:.0f} ms (collect {s['collect']:.0%}, "
            f"order {s['order']:.0%}, push {s['push']:.0%}; {result['plans_pushed']} plans)"
        )
    return 0
