"""Replay a workload's cojobs over real TCP between hosts in network namespaces.

* PS: each worker pushes model/#servers bytes to every server; a server that has all
  pushes sends as much back to every worker; the iteration ends when every worker has
  all pulls (the data dependencies are the iteration barrier).
* Ring all-reduce: 2(W-1) steps; in each, every worker sends model/W bytes to its ring
  successor, and the next step starts when every chunk of this one has arrived (a
  barrier per step: stricter than real rings, where a worker waits only for its
  predecessor; see docs/explanation/emulation.md).
* A compute gap precedes each iteration. A stage ends when all its jobs finish it;
  the jobs whose (hidden) stage count is reached are stopped (successive halving).

Every participant registers its job's flows with its host's agent (gRPC on the
agent's Unix socket) and reports progress after each iteration.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field

import grpc

from grouper.common import wire
from grouper.common.flows import flow_id
from grouper.pda.model import Cojob, Job
from grouper.trafficgen.netns import NetnsThread
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

log = logging.getLogger("grouper.trafficgen")


@dataclass
class Pipe:
    """One TCP connection between two hosts: each end reads and writes."""

    name: str
    a_host: str
    b_host: str
    port: int  # b's listening port
    a: tuple[asyncio.StreamReader, asyncio.StreamWriter]
    b: tuple[asyncio.StreamReader, asyncio.StreamWriter]

    def close(self) -> None:
        for _, w in (self.a, self.b):
            w.close()


@dataclass
class Hosts:
    addresses: dict[str, str]
    netns: dict[str, NetnsThread]
    registry: dict[str, pbg.RegistryStub | None]  # None: no agent on that host


class JobRunner:
    def __init__(
        self, hosts: Hosts, cojob: Cojob, job: Job, ports: itertools.count, ledger: wire.Ledger
    ) -> None:
        self.h, self.cojob, self.job = hosts, cojob, job
        self.ports, self.ledger = ports, ledger
        self.pipes: list[Pipe] = []
        self.flows: dict[str, dict[str, dict]] = defaultdict(dict)  # host -> id -> flow
        self.done = 0

    async def _pipe(
        self, a: str, b: str, kind: str, port: int | None = None, listener: object = None
    ) -> Pipe:
        loop = asyncio.get_running_loop()
        port = port or next(self.ports)
        lsock = listener or await self.h.netns[b].listen(self.h.addresses[b], port)
        csock = await self.h.netns[a].connect(self.h.addresses[b], port)
        ssock, _ = await loop.sock_accept(lsock)
        if listener is None:
            lsock.close()
        pa = await asyncio.open_connection(sock=csock)
        pb_ = await asyncio.open_connection(sock=ssock)
        name = f"{self.cojob.cojob_id}/{self.job.job_id}/{kind}{len(self.pipes)}"
        pipe = Pipe(name, a, b, port, pa, pb_)
        self.pipes.append(pipe)
        return pipe

    def _flow(self, src: str, dst: str, size: float, dport: int = 0, sport: int = 0) -> None:
        if src == dst:
            return  # host-local traffic never reaches the network
        fid = flow_id(self.cojob.cojob_id, self.job.job_id, dst, dport, sport)
        f = self.flows[src].setdefault(
            fid,
            {
                "src_host": src,
                "dst_host": dst,
                "dst_port": dport,
                "src_port": sport,
                "bytes_per_iteration": 0.0,
            },
        )
        f["bytes_per_iteration"] += size

    def declare(self) -> None:
        """Choose the job's ports and the flows it will send, before any connection:
        the job registers first, as a job started by ``grouper run`` does, so its
        handshakes are already its own (not other traffic, left in the default band)."""
        j = self.job
        if j.arch == "ps":
            self.shard = int(j.model_bytes / len(j.servers))
            self.server_ports = [next(self.ports) for _ in j.servers]
            for s, port in zip(j.servers, self.server_ports, strict=True):
                for w in j.workers:
                    self._flow(w, s, self.shard, dport=port)
                    self._flow(s, w, self.shard, sport=port)
        elif j.arch == "ring":
            n = len(j.workers)
            self.chunk = int(j.model_bytes / n)
            self.ring_ports = [next(self.ports) for _ in range(n)]
            for i, port in enumerate(self.ring_ports):
                a, b = j.workers[i], j.workers[(i + 1) % n]
                self._flow(a, b, 2 * (n - 1) * self.chunk, dport=port)
        else:
            self.flow_ports = [next(self.ports) for _ in j.flows]
            for f, port in zip(j.flows, self.flow_ports, strict=True):
                self._flow(f.src, f.dst, f.bytes, dport=port)

    async def setup(self) -> None:
        """Open the connections :meth:`declare` chose the ports of."""
        j = self.job
        if j.arch == "ps":
            self.ps: list[tuple[Pipe, int, int]] = []
            for si, (s, port) in enumerate(zip(j.servers, self.server_ports, strict=True)):
                lsock = await self.h.netns[s].listen(self.h.addresses[s], port)
                for wi, w in enumerate(j.workers):
                    pipe = await self._pipe(w, s, "ps", port, lsock)
                    self.ps.append((pipe, wi, si))
                lsock.close()
        elif j.arch == "ring":
            n = len(j.workers)
            self.ring = [
                await self._pipe(j.workers[i], j.workers[(i + 1) % n], "ring", self.ring_ports[i])
                for i in range(n)
            ]
        else:
            self.explicit = []
            for f, port in zip(j.flows, self.flow_ports, strict=True):
                pipe = await self._pipe(f.src, f.dst, "flow", port)
                self.explicit.append((pipe, int(f.bytes)))

    async def register(self) -> None:
        for host, flows in self.flows.items():
            await self._call(
                host,
                "RegisterJob",
                pb.JobRegistration(
                    cojob_id=self.cojob.cojob_id,
                    job_id=self.job.job_id,
                    arch=self.job.arch,
                    stage_iterations=list(self.cojob.stage_iterations),
                    model_bytes=self.job.model_bytes,
                    compute_time=self.job.compute_time,
                    flows=[pb.FlowSpec(**f) for f in flows.values()],
                ),
            )

    async def _call(self, host: str, method: str, msg: object) -> None:
        stub = self.h.registry.get(host)
        if stub is None:
            return
        try:
            ack = await getattr(stub, method)(msg, timeout=5)
            if not ack.ok:
                log.error("agent on %s refused %s: %s", host, method, ack.error)
        except grpc.aio.AioRpcError as exc:
            log.warning("agent on %s unreachable for %s: %s", host, method, exc.code().name)

    async def iteration(self, it: int) -> None:
        if self.job.compute_time > 0:
            await asyncio.sleep(self.job.compute_time)
        if self.job.arch == "ps":  # every worker pushes its shard, then pulls it back
            sz = self.shard
            await self._exchange([(p.a[1], p.b[0], it, sz, p.name + ">") for p, _, _ in self.ps])
            await self._exchange([(p.b[1], p.a[0], it, sz, p.name + "<") for p, _, _ in self.ps])
        elif self.job.arch == "ring":  # 2(W-1) steps, every hop moving one chunk per step
            for step in range(2 * (len(self.ring) - 1)):
                tag = it * 1000 + step
                await self._exchange([(p.a[1], p.b[0], tag, self.chunk, p.name) for p in self.ring])
        else:
            await self._exchange([(p.a[1], p.b[0], it, sz, p.name) for p, sz in self.explicit])
        self.done += 1
        await self._report_progress()

    async def _exchange(self, moves: list[tuple]) -> None:
        """Each (writer, reader, tag, bytes, name) at once: every send and its receive."""
        led = self.ledger
        await asyncio.gather(
            *(wire.send(w, k, tag, sz, led, name) for k, (w, _, tag, sz, name) in enumerate(moves)),
            *(wire.recv(r, k, tag, sz, led, name) for k, (_, r, tag, sz, name) in enumerate(moves)),
        )

    async def _report_progress(self) -> None:
        report = pb.ProgressReport(
            cojob_id=self.cojob.cojob_id, job_id=self.job.job_id, iterations_done=self.done
        )
        await asyncio.gather(*(self._call(h, "ReportProgress", report) for h in self.flows))

    async def finish(self) -> None:
        for p in self.pipes:
            p.close()
        await asyncio.gather(
            *(
                self._call(
                    h,
                    "JobFinished",
                    pb.JobFinishedReport(cojob_id=self.cojob.cojob_id, job_id=self.job.job_id),
                )
                for h in self.flows
            )
        )


@dataclass
class ReplayResult:
    stages: list[dict] = field(default_factory=list)
    jobs: list[dict] = field(default_factory=list)
    ledger: wire.Ledger = field(default_factory=wire.Ledger)
    errors: list[str] = field(default_factory=list)


async def replay(
    cojobs: list[Cojob], hosts: Hosts, release_after: dict[str, tuple[str, int]] | None = None
) -> ReplayResult:
    """Run every cojob from its arrival (or the stage it is released after) to its end,
    all at once; what went wrong is in the result's ``errors``."""
    run = _Replay(cojobs, hosts, release_after or {})
    outcomes = await asyncio.gather(
        *(run.cojob(i, c) for i, c in enumerate(cojobs)), return_exceptions=True
    )
    res = run.res
    for c, o in zip(cojobs, outcomes, strict=True):
        if isinstance(o, BaseException):
            res.errors.append(f"{c.cojob_id}: {type(o).__name__}: {o}")
    short = res.ledger.shortfall()
    if short:
        res.errors.append(f"bytes missing on {len(short)} flows: {dict(list(short.items())[:5])}")
    return res


class _Replay:
    """What the cojobs of one replay share: the clock, ports, results and the events
    that order their starts."""

    def __init__(
        self, cojobs: list[Cojob], hosts: Hosts, release_after: dict[str, tuple[str, int]]
    ) -> None:
        self.hosts, self.release_after = hosts, release_after
        self.res = ReplayResult()
        self.ports = itertools.count(20000)
        self.t0 = time.monotonic()
        self.stage_done: dict[tuple[str, int], asyncio.Event] = defaultdict(asyncio.Event)
        self.before = _same_time_predecessors(cojobs, release_after)
        self.stamped = [asyncio.Event() for _ in cojobs]

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def cojob(self, i: int, cj: Cojob) -> None:
        try:
            try:
                arrival, runners = await self.arrive(i, cj)
            finally:  # even when it failed: the cojob after it must not wait forever
                self.stamped[i].set()
            await asyncio.gather(*(r.register() for r in runners[1:]))
            for r in runners:
                await r.setup()
            await self.stages(cj, runners, arrival)
        finally:  # cojobs released after a stage it did not reach (failed, or all its
            # jobs ended before) start when it ends, instead of never
            for k in range(len(cj.stage_iterations)):
                self.stage_done[(cj.cojob_id, k + 1)].set()

    async def arrive(self, i: int, cj: Cojob) -> tuple[float, list[JobRunner]]:
        """Wait for the cojob's arrival, then register its first job, after the cojob
        before it that arrives at the same time: the agents stamp a cojob's arrival at
        its first registration."""
        trigger = self.release_after.get(cj.cojob_id)
        if trigger:
            await self.stage_done[trigger].wait()
        else:
            await asyncio.sleep(max(0.0, cj.arrival - self.now()))
        arrival = self.now()
        runners = [JobRunner(self.hosts, cj, j, self.ports, self.res.ledger) for j in cj.jobs]
        for r in runners:
            r.declare()
        if i in self.before:
            await self.stamped[self.before[i]].wait()
        await runners[0].register()
        return arrival, runners

    async def stages(self, cj: Cojob, runners: list[JobRunner], arrival: float) -> None:
        """Each stage's iterations on every job still alive, then the barrier; the jobs
        whose stage count is reached stop there (successive halving)."""
        alive, bound, start = list(runners), 0, arrival
        for k, iters in enumerate(cj.stage_iterations):
            first, bound = bound, bound + iters

            async def run_stage(r: JobRunner, lo: int = first, hi: int = bound) -> None:
                for it in range(lo, hi):
                    await r.iteration(it)

            await asyncio.gather(*(run_stage(r) for r in alive))
            end = self.now()
            stage = {"cojob": cj.cojob_id, "stage": k + 1, "start": start, "end": end}
            self.res.stages.append({**stage, "sct": end - arrival, "duration": end - start})
            self.stage_done[(cj.cojob_id, k + 1)].set()
            start = end
            last = k + 1 == len(cj.stage_iterations)
            for r in list(alive):
                if last or (r.job.stages is not None and r.job.stages <= k + 1):
                    alive.remove(r)
                    await r.finish()
                    job = {"cojob": cj.cojob_id, "job": r.job.job_id, "arrival": arrival}
                    self.res.jobs.append({**job, "end": end, "jct": end - arrival, "stages": k + 1})
            if not alive:
                break


def _same_time_predecessors(
    cojobs: list[Cojob], release_after: dict[str, tuple[str, int]]
) -> dict[int, int]:
    """For each cojob, the one before it in the workload that arrives at the same time
    (neither released by another's stage). It registers after that one, so the
    coordinator sees simultaneous arrivals in workload order, the simulator's tie-break,
    instead of whichever task the event loop ran first."""
    last: dict[float, int] = {}
    before = {}
    for i, cj in enumerate(cojobs):
        if cj.cojob_id in release_after:
            continue
        if cj.arrival in last:
            before[i] = last[cj.arrival]
        last[cj.arrival] = i
    return before
