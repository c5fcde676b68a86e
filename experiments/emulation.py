"""One emulated run: fabric up, agents and coordinator up, traffic replayed, all down.

Agents run in every host in every policy, so host NICs are shaped the same way; under
``fs`` no coordinator runs and agents never get a plan (one band, fair sharing).
Control traffic (coordinator <-> agents, trafficgen -> agents) uses Unix sockets, so
it does not cross the emulated data network.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from grouper.common.cluster_doc import write_cluster
from grouper.common.contention import ContentionModel
from grouper.common.interpreter import python_argv
from grouper.experiments.connections import ConnectionSampler
from grouper.experiments.cpustats import StealMonitor
from grouper.experiments.tcpstats import host_counters
from grouper.topologies import congestion
from grouper.topologies.leafspine import Fabric, LeafSpine
from grouper.trafficgen.netns import NetnsThread
from grouper.trafficgen.replay import Hosts, ReplayResult, replay
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from grouper.workloads.model import Workload

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class RunOutput:
    policy: str
    replay: ReplayResult
    band_bytes: dict[str, dict[int, int]] = field(default_factory=dict)
    logs: Path | None = None
    tcp: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> TCP counters
    cpu_steal: dict[str, float] = field(default_factory=dict)  # mean and worst second


def cluster_config(
    spec: LeafSpine, policy: str, period: float, work: Path, plan_ttl: float = 3.0,
    sockets: Path | None = None,
) -> Path:  # fmt: skip
    hosts = [(h, a, f"{h}-eth0", spec.mbps) for h, a in spec.addresses.items()]
    return write_cluster(
        work / "cluster.yaml",
        hosts,
        cluster="emulated",
        sockets=sockets or work,
        queues={
            "count": spec.queues.queues,
            "reserved": list(spec.queues.reserved),
            "dscp": list(spec.queues.dscp_table),
            "min_share": spec.queues.min_share,
        },
        admission=_admission(spec.queues.admission),
        scheduling={
            "policy": "grouper" if policy == "fs" else policy,
            "period": period,
            "min_gap": 0.05,
        },
        failure={"plan_ttl": max(plan_ttl, 2 * period), "agent_timeout": 2.0},
        agent={"metrics_port": 0, "backend": spec.host_backend},
        coordinator={"listen": "127.0.0.1:17001"},
        metrics={"coordinator": "127.0.0.1:0"},
    )


def _admission(model: ContentionModel | None) -> dict:
    if model is None:
        return {"enabled": False}
    return {"enabled": True, "a": model.a, "b": model.b, "eta": model.eta}


class Emulation:
    def __init__(self, spec: LeafSpine, policy: str, period: float, work: Path) -> None:
        # every path handed to the agents and the coordinator is absolute: they do not
        # share this process's working directory
        self.spec, self.policy, self.period = spec, policy, period
        self.work = work.resolve()
        self.sockets = self.work  # the agents' sockets' folder (start() makes its own)
        self.sampler: ConnectionSampler | None = None
        self.host_cc: dict[str, str] = {}  # each host's congestion control (start())
        self.connections: list[dict] = []  # each TCP connection's path and state (stop())
        self.fabric = Fabric(spec)
        self.agents: dict[str, subprocess.Popen] = {}
        self.coordinator: subprocess.Popen | None = None
        self.netns: dict[str, NetnsThread] = {}
        self.coordinator_args: list[str] = []  # e.g. ["--trace", FILE]

    def start(self) -> None:
        if self.work.exists():
            shutil.rmtree(self.work)  # no state left from an earlier run
        self.work.mkdir(parents=True)
        # the agents' sockets apart from the work folder, whatever its depth: a Unix
        # socket's path holds at most 107 bytes
        self.sockets = Path(tempfile.mkdtemp(prefix="grouper-emu-"))
        self.fabric.start()
        self.host_cc = self.fabric.congestion_controls()
        cfg = cluster_config(self.spec, self.policy, self.period, self.work, sockets=self.sockets)
        self.config = cfg
        for h in self.spec.host_names:
            log = (self.work / f"{h}-agent.log").open("w")
            self.agents[h] = self.fabric.host(h).popen(
                [
                    *python_argv("-m", "grouper.cli"),
                    "agent",
                    "--config",
                    str(cfg),
                    "--host",
                    h,
                    "--listen",
                    f"unix:{self.sockets}/{h}-agent.sock",
                    "--socket",
                    str(self.sockets / f"{h}-registry.sock"),
                    "--jobs-dir",
                    str(self.work / f"{h}-jobs"),
                    "--state-file",
                    str(self.work / f"{h}-state.json"),
                    "--metrics-port",
                    "0",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        for h in self.spec.host_names:
            self._wait_socket(self.sockets / f"{h}-registry.sock", self.agents[h], h)
            self.netns[h] = NetnsThread(self.fabric.netns_path(h))
        if self.policy != "fs":
            self.start_coordinator()
            # as on a cluster, the coordinator is up before jobs arrive: without this the
            # replay's first 1.5-2 s ran unplanned (the process starts in about a second)
            self._wait_coordinator()
        self.sampler = ConnectionSampler(self.fabric, congestion.CHOICES)
        self.sampler.start()

    def start_coordinator(self) -> None:
        log = (self.work / "coordinator.log").open("a")
        self.coordinator = subprocess.Popen(
            [
                *python_argv("-m", "grouper.cli"),
                "coordinator",
                "--config",
                str(self.config),
                "--log-level",
                "DEBUG",
                *self.coordinator_args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )

    def kill_coordinator(self) -> None:
        if self.coordinator and self.coordinator.poll() is None:
            self.coordinator.kill()
            self.coordinator.wait(timeout=10)

    def _wait_coordinator(self, seconds: float = 90.0) -> None:
        """Until the coordinator has reached every agent (its log says so per host)."""
        log = self.work / "coordinator.log"
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.coordinator is None or self.coordinator.poll() is not None:
                raise RuntimeError(f"coordinator exited: {log.read_text()[-1500:]}")
            text = log.read_text()
            if all(f"agent {h} is up" in text for h in self.spec.host_names):
                return
            time.sleep(0.1)
        raise RuntimeError(f"coordinator did not reach every agent in {seconds:g} s")

    def _wait_socket(self, path: Path, proc: subprocess.Popen, host: str) -> None:
        deadline = time.monotonic() + 90  # bounds a failure: the stock-kernel VM is ~10x slower
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = (self.work / f"{host}-agent.log").read_text()[-1500:]
                raise RuntimeError(f"agent on {host} exited: {log}")
            if path.exists():
                return
            time.sleep(0.1)
        raise RuntimeError(f"agent on {host} did not come up")

    async def run(self, wl: Workload, kill_coordinator_after: float | None = None) -> RunOutput:
        channels = {
            h: grpc.aio.insecure_channel(f"unix:{self.sockets}/{h}-registry.sock")
            for h in self.spec.host_names
        }
        hosts = Hosts(
            self.spec.addresses, self.netns, {h: pbg.RegistryStub(c) for h, c in channels.items()}
        )
        killer = None
        if kill_coordinator_after is not None:

            async def kill_later() -> None:
                await asyncio.sleep(kill_coordinator_after)
                self.kill_coordinator()

            killer = asyncio.create_task(kill_later())
        steal = StealMonitor()
        steal.start()
        try:
            res = await replay(list(wl.cojobs), hosts, wl.release_after)
        finally:
            steal.stop()
            if killer:
                killer.cancel()
            for c in channels.values():
                await c.close()
        tcp = {h: host_counters(self.fabric.host(h).pid) for h in self.spec.host_names}
        bands = await self.band_bytes()
        return RunOutput(self.policy, res, bands, self.work, tcp, steal.summary())

    async def band_bytes(self) -> dict[str, dict[int, int]]:
        out = {}
        for h in self.spec.host_names:
            async with grpc.aio.insecure_channel(f"unix:{self.sockets}/{h}-agent.sock") as ch:
                try:
                    rep = await pbg.AgentStub(ch).Collect(pb.CollectRequest(), timeout=5)
                    out[h] = {b.band: b.bytes for b in rep.bands if b.bytes}
                except grpc.aio.AioRpcError:
                    out[h] = {}
        return out

    def stop(self) -> None:
        """Stop what we started, by pid, then the fabric. Safe to call twice. What the
        connection sampler saw is left in ``connections``."""
        if self.sampler is not None:
            self.connections = self.sampler.stop()
            self.sampler = None
        if self.coordinator and self.coordinator.poll() is None:
            self.coordinator.send_signal(signal.SIGTERM)
            try:
                self.coordinator.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.coordinator.kill()
        for p in self.agents.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.agents.values():
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        for t in self.netns.values():
            t.close()
        self.netns.clear()
        self.fabric.stop()
        if self.sockets != self.work:
            shutil.rmtree(self.sockets, ignore_errors=True)
            self.sockets = self.work
