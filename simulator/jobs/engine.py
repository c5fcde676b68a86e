"""Job-level discrete-event simulation of Wang et al. 2020 (Section IV, Algorithm 3).

Jobs arrive, wait in a queue sorted by SRSF, and are placed on GPUs (one of
:mod:`simulator.jobs.placement`) when enough GPUs have the memory. A placed job keeps
its GPUs to the end (no preemption or migration). Several jobs may share a GPU (memory
allows it); a GPU runs one compute task at a time, picking the ready worker of the job
with the shortest remaining service (SRSF). A worker's task is one iteration's forward
and backward pass. When every worker of a job has finished it, a job on more than one
server all-reduces its gradients; the scheduler (:mod:`simulator.jobs.schedulers`)
decides, in SRSF order, which waiting all-reduces start now. A running all-reduce moves
its bytes at ``1 / (k b + (k - 1) eta)`` bytes per second, ``k`` the most all-reduces
on any of its servers (Eq. 5, rates recomputed whenever ``k`` changes), then waits the
latency ``a``. A job on one server all-reduces over NVLink, at no cost (Fig. 1a).

With ``hold_gpus`` a job keeps its GPUs from the start of an iteration's compute to the
end of its all-reduce (no other job computes on them meanwhile): the reading of
"a GPU is occupied by one job at a time" under which waiting for the network idles GPUs.

Where the paper and the authors' simulator differ, :class:`~simulator.jobs.rules.Rules`
selects either (the paper's by default): the LWF load, the servers AdaDUAL checks, the
SRSF key and whether forward and backward are one task or two.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field

import numpy as np

from grouper.common.errors import ConfigError
from grouper.simulator.jobs.jobstate import COMM, COMM_READY, COMPUTE, DONE, LATENCY, Job
from grouper.simulator.jobs.placement import Placement
from grouper.simulator.jobs.rules import Rules
from grouper.simulator.jobs.schedulers import CommScheduler
from grouper.workloads.jobmix import JobMix

ARRIVE, WORKER_DONE, BYTES_DONE, ITERATION_DONE, WAKE = range(5)


@dataclass
class JobsResult:
    placement: str
    scheduler: str
    jobs: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    gpu_utilization: list[float] = field(default_factory=list)


class Simulation:
    """One run of a job mix under one placement and one all-reduce scheduler."""

    def __init__(
        self,
        mix: JobMix,
        placement: Placement,
        scheduler: CommScheduler,
        seed: int = 1,
        rules: Rules | None = None,
    ) -> None:
        self.mix, self.placement, self.scheduler = mix, placement, scheduler
        self.rules = rules or Rules()
        self.two_tasks = self.rules.tasks == "code"
        if self.two_tasks and mix.hold_gpus:
            raise ConfigError("--rules", "tasks=code does not combine with --hold-gpus")
        self.model = mix.contention
        c = mix.cluster
        self.per_server = c.gpus_per_server
        self.rng = np.random.default_rng(seed)
        self.jobs = [
            Job(j, mix.iteration_batch, self.model.a, self.model.b, self.rules) for j in mix.jobs
        ]
        self.mem_free = np.full(c.gpus, c.gpu_memory_mb)
        self.residents: list[list[Job]] = [[] for _ in range(c.gpus)]
        self.busy: list[Job | None] = [None] * c.gpus
        self.busy_time = np.zeros(c.gpus)
        self.server_comm: list[set[Job]] = [set() for _ in range(c.servers)]
        self.queue: list[Job] = []
        # all-reduces waiting to start; a refused one can only be admitted after an
        # all-reduce on one of its servers ends (remaining bytes only shrink, and more
        # all-reduces only add load: neither turns a refusal into an admission), so
        # only new ones and those on freed servers are checked
        self.comm_ready: list[Job] = []
        self.comm_new: list[Job] = []
        self.freed: set[int] = set()
        self.comm_starts = self.comm_shared = 0
        self.active: list[Job] = []
        self.events: list[tuple[float, int, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.to_place = False
        self.idle: set[int] = set()  # GPUs to offer work to at the next dispatch

    def push(self, t: float, kind: int, job: Job, extra: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, job.id, extra))

    def run(self) -> JobsResult:
        started = time.perf_counter()
        for j in self.jobs:
            self.push(j.spec.arrival, ARRIVE, j)
        while self.events:
            t, _, kind, jid, extra = heapq.heappop(self.events)
            self.now = t
            self.handle(kind, self.jobs[jid], extra)
            if not self.events or self.events[0][0] > t:
                self.dispatch()
        stuck = [j.id for j in self.jobs if j.phase != DONE]
        if stuck:  # a bug, not bad input: every job fits an empty cluster
            raise RuntimeError(f"jobs {stuck[:5]} never finished")
        return self.result(time.perf_counter() - started)

    # events -------------------------------------------------------------------------

    def handle(self, kind: int, job: Job, extra: object) -> None:
        if kind == ARRIVE:
            self.queue.append(job)
            self.to_place = True
        elif kind == WORKER_DONE:
            gpu = int(extra)  # type: ignore[arg-type]
            if not self.mix.hold_gpus:  # else held until the iteration's all-reduce ends
                self.busy[gpu] = None
                self.idle.add(gpu)
            job.running -= 1
            if self.two_tasks:
                if gpu not in job.fw_done:  # the forward pass: the backward one waits
                    job.fw_done.add(gpu)
                    job.waiting.add(gpu)
                    job.cumul_left -= job.t_f
                    return
                job.fw_done.discard(gpu)
                job.cumul_left -= job.t_b
            else:
                job.cumul_left -= job.compute
            if job.running == 0 and not job.waiting:
                if job.multi:
                    job.phase = COMM_READY
                    self.comm_new.append(job)
                else:  # one server: NVLink, free (Fig. 1a)
                    self.iteration_done(job)
        elif kind == BYTES_DONE:
            if extra == job.version and job.phase == COMM:
                self.end_comm(job)
        elif kind == WAKE:
            pass  # a dispatch one slot on (see start_comm)
        else:
            self.iteration_done(job)

    def iteration_done(self, job: Job) -> None:
        if self.mix.hold_gpus:
            for g in job.gpus:
                self.busy[g] = None
        job.left -= 1
        if job.left > 0:
            job.phase = COMPUTE
            job.waiting = set(job.gpus)
            self.idle.update(job.gpus)
            return
        job.phase, job.end = DONE, self.now
        self.active.remove(job)
        for g in job.gpus:
            self.mem_free[g] += job.memory
            self.residents[g].remove(job)
        self.idle.update(job.gpus)
        self.to_place = True

    # all-reduces --------------------------------------------------------------------

    def start_comm(self, job: Job) -> None:
        self.comm_starts += 1
        self.comm_shared += any(self.server_comm[s] for s in job.servers)
        job.phase, job.comm_left, job.stamp = COMM, job.bytes, self.now
        job.comm_start = self.now
        if self.rules.adadual_servers == "code":
            # a new all-reduce can turn a refusal into an admission when it becomes the
            # first one a waiting job checks; the authors' loop checks again a slot on
            self.freed.update(job.servers)
            self.push(self.now + self.rules.slot, WAKE, job)
        for s in job.servers:
            self.server_comm[s].add(job)
        self.rerate(job.servers)

    def end_comm(self, job: Job) -> None:
        self.freed.update(job.servers)
        for s in job.servers:
            self.server_comm[s].discard(job)
        job.phase = LATENCY
        self.push(self.now + job.latency, ITERATION_DONE, job)
        self.rerate(job.servers)

    def rerate(self, servers: list[int]) -> None:
        """Recompute the rate of every all-reduce on ``servers`` (Eq. 5's ``k``)."""
        touched: set[Job] = set()
        for s in servers:
            touched |= self.server_comm[s]
        self.rerate_jobs(touched)

    def rerate_jobs(self, jobs: set[Job]) -> None:
        for j in sorted(jobs, key=lambda x: x.id):
            j.comm_left = self.bytes_left(j)
            j.stamp = self.now
            j.rate = self.comm_rate(j)
            j.version += 1
            self.push(self.now + j.comm_left / j.rate, BYTES_DONE, j, j.version)

    def comm_rate(self, job: Job) -> float:
        """Bytes per second of a running all-reduce: Eq. 5 at the busiest of its servers."""
        k = max(len(self.server_comm[s]) for s in job.servers)
        return 1.0 / self.model.shared_seconds_per_byte(k)

    def checked(self, job: Job) -> list[Job]:
        """The running all-reduces AdaDUAL tests ``job`` against (``adadual-servers``):
        every one on its servers, or those of the first server that has one."""
        if self.rules.adadual_servers == "code":
            for s in job.server_order:
                if self.server_comm[s]:
                    return sorted(self.server_comm[s], key=lambda x: x.id)
            return []
        return sorted({o for s in job.servers for o in self.server_comm[s]}, key=lambda x: x.id)

    def remaining_bytes(self, job: Job) -> list[float]:
        return [self.bytes_left(o) for o in self.checked(job)]

    def bytes_left(self, job: Job) -> float:
        """A running all-reduce's bytes still to move now (its rate since ``stamp``)."""
        return max(job.comm_left - (self.now - job.stamp) * job.rate, 0.0)

    # decisions ----------------------------------------------------------------------

    def dispatch(self) -> None:
        if self.to_place:
            self.place_queued()
        if self.comm_new or (self.freed and self.comm_ready):
            self.admit_comm()
        if self.idle:
            self.run_gangs() if self.mix.hold_gpus else self.run_compute()

    def place_queued(self) -> None:
        self.to_place = False
        self.queue.sort(key=lambda j: (j.remaining, j.id))
        load = self.gpu_load()
        placed = []
        for job in self.queue:
            got = self.placement.choose(
                job.n, load, self.mem_free >= job.memory, self.per_server, self.rng
            )
            if got is None:
                continue
            gpus = got.tolist()
            job.place(gpus, self.per_server)
            job.placed, job.phase = self.now, COMPUTE
            job.waiting = set(gpus)
            self.mem_free[gpus] -= job.memory
            load[gpus] += self.new_load(job)
            for g in gpus:
                self.residents[g].append(job)
            self.idle.update(gpus)
            self.active.append(job)
            placed.append(job)
        for job in placed:
            self.queue.remove(job)

    def gpu_load(self) -> np.ndarray:
        """Each GPU's load for LWF-kappa (``lwf-load``)."""
        load = np.zeros(len(self.busy))
        for j in self.active:
            if self.rules.lwf_load == "code":
                for g in j.gpus:
                    load[g] += j.lwf_load(g, self.busy[g])
            else:
                load[j.gpus] += j.left * j.compute * j.n  # L_J = C_J x |G(J)| (Algorithm 1)
        return load

    def new_load(self, job: Job) -> float:
        if self.rules.lwf_load == "code":
            return job.left * (job.compute + job.lwf_comm)
        return job.left * job.compute * job.n

    def admit_comm(self) -> None:
        freed = self.freed
        candidates = self.comm_new + [j for j in self.comm_ready if not freed.isdisjoint(j.servers)]
        self.comm_ready += self.comm_new
        self.comm_new, self.freed = [], set()
        candidates.sort(key=lambda j: (j.remaining, j.id))
        started = []
        for job in list(candidates):
            loads = [len(self.server_comm[s]) for s in job.servers]
            if self.scheduler.admit(
                job.bytes, loads, lambda job=job: self.remaining_bytes(job), self.model
            ):
                self.start_comm(job)
                started.append(job)
        for job in started:
            self.comm_ready.remove(job)

    def run_compute(self) -> None:
        for g in sorted(self.idle):
            if self.busy[g] is not None:
                continue
            best = None
            for j in self.residents[g]:
                if g in j.waiting and (
                    best is None or (j.remaining, j.id) < (best.remaining, best.id)
                ):
                    best = j
            if best is None:
                continue
            best.waiting.discard(g)
            best.running += 1
            self.busy[g] = best
            took = best.compute
            if self.two_tasks:
                took = best.t_b if g in best.fw_done else best.t_f
            self.busy_time[g] += took
            self.push(self.now + took, WORKER_DONE, best, g)
        self.idle.clear()

    def run_gangs(self) -> None:
        """``hold_gpus``: a job starts an iteration when all its GPUs are free, in SRSF
        order (per-GPU choices could each hold a GPU the other needs: a deadlock)."""
        ready = {j for g in self.idle for j in self.residents[g] if j.phase == COMPUTE}
        for job in sorted(ready, key=lambda j: (j.remaining, j.id)):
            if job.running or any(self.busy[g] is not None for g in job.gpus):
                continue
            job.waiting.clear()
            job.running = job.n
            for g in job.gpus:
                self.busy[g] = job
                self.busy_time[g] += job.compute
                self.push(self.now + job.compute, WORKER_DONE, job, g)
        self.idle.clear()

    # results ------------------------------------------------------------------------

    def result(self, seconds: float) -> JobsResult:
        rows = []
        for j in self.jobs:
            rows.append(
                {
                    "job": j.id,
                    "model": j.spec.model.name,
                    "gpus": j.n,
                    "iterations": j.spec.iterations,
                    "arrival": j.spec.arrival,
                    "placed": j.placed,
                    "end": j.end,
                    "jct": j.end - j.spec.arrival,
                    "servers": len(j.servers),
                }
            )
        jct = np.array([r["jct"] for r in rows])
        makespan = float(max(j.end for j in self.jobs))
        util = (self.busy_time / makespan).tolist() if makespan > 0 else []
        summary = {
            "avg_jct": float(jct.mean()),
            "median_jct": float(np.median(jct)),
            "p95_jct": float(np.percentile(jct, 95)),
            "makespan": makespan,
            "avg_gpu_utilization": float(np.mean(util)) if util else 0.0,
            "all_reduces": self.comm_starts,
            "all_reduces_shared": self.comm_shared,
            "avg_queueing": float(np.mean([r["placed"] - r["arrival"] for r in rows])),
            "seconds": seconds,
        }
        return JobsResult(self.placement.name, self.scheduler.name, rows, summary, util)
