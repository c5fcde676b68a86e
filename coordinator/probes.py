"""The calibration's traffic between real hosts, started through their agents.

``grouper calibrate --config CLUSTER.yaml`` measures the contention model on the
cluster's own network: for each point it asks the listening host's agent for k
sockets, then has that agent and the sending hosts' agents run the rounds at once
(``agent.probe``). It calls the agents as the coordinator does (``channel_for``: the
config's TLS identity, which agents require for probes), so run it where the
coordinator's certificate is. The listening end sees all k tasks; its rounds set the
point (the median over rounds, as on the emulated fabric).
"""

from __future__ import annotations

import asyncio
import statistics
from collections import defaultdict

import grpc

from grouper.common.cluster_config import ClusterConfig
from grouper.common.errors import ConfigError
from grouper.coordinator.links import channel_for
from grouper.pda.calibration import Sample
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

LISTEN_DEADLINE = 10.0


def _deadline(k: int, size: float, reps: int, mbps: float) -> float:
    """Ten times the ideal time of every round's bytes, and half a minute to connect."""
    return 30.0 + 10.0 * (reps + 1) * k * size * 8 / (mbps * 1e6)


async def _point(
    cfg: ClusterConfig,
    stubs: dict[str, pbg.AgentStub],
    pairs: list[tuple[str, str]],
    size: float,
    reps: int,
) -> float:
    listener = pairs[0][1]
    k = len(pairs)
    stage = "listen"
    try:
        reply = await stubs[listener].ProbeListen(
            pb.ProbeListenRequest(tasks=k), timeout=LISTEN_DEADLINE
        )
        ports: dict[str, list[int]] = defaultdict(list)
        for (src, _), port in zip(pairs, reply.ports, strict=True):
            ports[src].append(port)
        deadline = _deadline(k, size, reps, cfg.host(listener).link_mbps)
        stage = "probe"
        calls = [
            stubs[listener].Probe(
                pb.ProbeRequest(token=reply.token, bytes=size, rounds=reps), timeout=deadline
            )
        ] + [
            stubs[h].Probe(
                pb.ProbeRequest(peer_address=reply.address, peer_ports=p, bytes=size, rounds=reps),
                timeout=deadline,
            )
            for h, p in ports.items()
        ]
        results = await asyncio.gather(*calls)
    except grpc.aio.AioRpcError as e:
        raise ConfigError(
            "--config",
            f"{stage} with k={k}, M={size:g} between {', '.join(sorted(set(sum(pairs, ()))))}: "
            f"{e.code().name}: {e.details()}",
        ) from None
    return statistics.median(results[0].round_seconds)


Plan = list[tuple[float, list[tuple[str, str]], int]]  # (M, each task's hosts, rounds)


async def _measure(cfg: ClusterConfig, plan: Plan) -> list[Sample]:
    hosts = sorted({h for _, pairs, _ in plan for p in pairs for h in p})
    channels = {h: channel_for(cfg.host(h), cfg) for h in hosts}
    try:
        stubs = {h: pbg.AgentStub(c) for h, c in channels.items()}
        return [
            Sample(len(pairs), size, await _point(cfg, stubs, pairs, size, reps))
            for size, pairs, reps in plan
        ]
    finally:
        for c in channels.values():
            await c.close()


def measure(cfg: ClusterConfig, plan: Plan) -> list[Sample]:
    """One sample per (size, host pairs of the k tasks, timed rounds) in ``plan``, in
    its order; the second host of the first pair listens for all k tasks."""
    return asyncio.run(_measure(cfg, plan))
