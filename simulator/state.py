"""What the simulation engine tracks: jobs, cojobs, and the result it reports."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from grouper.pda.flow_table import FlowTable, flow_arrays
from grouper.pda.model import Cojob, Job
from grouper.workloads.topology import Topology


@dataclass
class SimJob:
    cojob: int
    job_id: str
    src: np.ndarray  # host index per flow
    dst: np.ndarray
    size: np.ndarray  # bytes per flow per round (per iteration when ``rounds`` is 1)
    paths: list[np.ndarray]
    compute: float
    runs: int  # stages the job runs before it is killed (hidden from online policies)
    done: int = 0
    phase: str = "idle"  # compute | comm | barrier | dead
    end: float = math.nan
    step: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # per flow
    current_step: int = 0
    rounds: int = 1  # rounds of steps per iteration (a ring in steps: 2(W-1))
    current_round: int = 0
    stage: int = 0  # the stage the job is in (its cojob's, under the barrier)
    weight: float = 1.0
    specs: FlowTable | None = None  # the flows as the scheduling core sees them
    index: int = -1  # in the engine's job list
    # views of this job's flows in the engine's flat arrays (set by the engine)
    remaining: np.ndarray = field(default_factory=lambda: np.zeros(0))
    band: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rband: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


@dataclass
class SimCojob:
    cojob_id: str
    arrival: float
    iters: tuple[int, ...]
    jobs: list[int]
    stage: int = -1
    started: list[float] = field(default_factory=list)
    finished: list[float] = field(default_factory=list)
    barrier: bool = True  # jobs wait for each other at every stage's end

    @property
    def bounds(self) -> list[int]:
        return list(np.cumsum(self.iters))


@dataclass
class SimResult:
    policy: str
    stages: list[dict]  # cojob, stage, start, end, sct, duration
    jobs: list[dict]  # cojob, job, arrival, end, jct, stages
    events: int
    reschedules: int
    bytes_delivered: float = 0.0  # integral of rates over time
    bytes_expected: float = 0.0  # iterations run x bytes per iteration crossing the network
    allocations: int = 0  # rates computed (once an event)
    fallbacks: int = 0  # of them, where the rounds did not settle: worst-queue rates


class FinishedRun(Protocol):
    """What a finished run hands :func:`collect_result`: the engines (``Engine``, and
    ``FastEngine`` for coflow-shaped workloads) provide it, so this module, below both,
    imports neither."""

    policy: str
    jobs: list[SimJob]
    cojobs: list[SimCojob]
    events: int
    reschedules: int
    delivered: float
    allocations: int
    fallbacks: int
    local_on_ports: bool


def collect_result(engine: FinishedRun) -> SimResult:
    """Every finished stage and every job of a finished run."""
    stages, jobs = [], []
    for c in engine.cojobs:
        for k, end in enumerate(c.finished):
            start = c.started[k]
            stages.append(
                {
                    "cojob": c.cojob_id,
                    "stage": k + 1,
                    "start": start,
                    "end": end,
                    "sct": end - c.arrival,
                    "duration": end - start,
                    # its heaviest job that ran it (the planner's weight, offline view)
                    "weight": max(engine.jobs[i].weight for i in c.jobs if engine.jobs[i].runs > k),
                }
            )
        for i in c.jobs:
            j = engine.jobs[i]
            jobs.append(
                {
                    "cojob": c.cojob_id,
                    "job": j.job_id,
                    "arrival": c.arrival,
                    "end": j.end,
                    "jct": j.end - c.arrival,
                    "stages": j.runs,
                }
            )
    moved = (lambda j: j.size) if engine.local_on_ports else (lambda j: j.size[j.src != j.dst])
    expected = sum(j.done * j.rounds * float(moved(j).sum()) for j in engine.jobs)
    return SimResult(
        engine.policy, stages, jobs, engine.events, engine.reschedules, engine.delivered,
        expected, engine.allocations, engine.fallbacks,
    )  # fmt: skip


def build_jobs(
    cojobs: list[Cojob], topo: Topology, ps_overlap: bool, ring_steps: bool
) -> tuple[list[SimJob], list[SimCojob]]:
    """The engine's jobs and cojobs, cojobs by arrival (stable: workload order breaks
    ties), each job's flows with their paths through ``topo``."""
    host = {h: i for i, h in enumerate(topo.hosts)}
    jobs: list[SimJob] = []
    sim_cojobs: list[SimCojob] = []
    for g, cj in enumerate(sorted(cojobs, key=lambda c: c.arrival)):
        ids = []
        for job in cj.jobs:
            ids.append(len(jobs))
            jobs.append(_sim_job(g, cj, job, topo, host, len(jobs), ps_overlap, ring_steps))
        sim_cojobs.append(
            SimCojob(cj.cojob_id, cj.arrival, cj.stage_iterations, ids, barrier=cj.barrier)
        )
    return jobs, sim_cojobs


def _sim_job(
    g: int,
    cj: Cojob,
    job: Job,
    topo: Topology,
    host: dict[str, int],
    index: int,
    ps_overlap: bool,
    ring_steps: bool,
) -> SimJob:
    src, dst, nbytes = flow_arrays(job.flows, host, f"{cj.cojob_id}/{job.job_id}")
    paths = [
        np.asarray(topo.path(s, d, f"{cj.cojob_id}/{job.job_id}/{k}"))
        for k, (s, d) in enumerate(zip(src, dst, strict=True))
    ]
    # PS flows alternate push, pull (Job.ps): sequential mode runs the pulls once every
    # push is in, overlap mode runs both at once
    step = (
        np.arange(len(job.flows)) % 2
        if job.arch == "ps" and not ps_overlap
        else np.zeros(len(job.flows), np.int64)
    )
    # a ring in steps: 2(W-1) rounds, every hop moving one chunk per round
    rounds = 2 * (len(job.workers) - 1) if job.arch == "ring" and ring_steps else 1
    return SimJob(
        g,
        job.job_id,
        src,
        dst,
        nbytes / rounds,
        paths,
        job.compute_time,
        job.stages or cj.num_stages,
        step=step,
        index=index,
        weight=job.weight,
        rounds=rounds,
    )
