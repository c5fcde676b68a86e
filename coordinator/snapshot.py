"""Agents' reports -> the scheduling model (pure).

Each agent reports the jobs its local participants registered, with the flows they
send. A job spread over several hosts is merged by (cojob, job): flows are united by
(sending host, flow id), progress is the slowest participant's, and a job any
participant reported finished is gone. Every job is assumed to run all its remaining
stages (online).

Registrations are immutable once accepted, so the validated :class:`ReportedJob`
templates are reused across cycles and progress travels beside them
(:class:`JobReport`); :class:`MergeCache` keeps the flow tuples built for a job as long
as the templates it was built from are the same objects.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from common.flows import inbound_key, parse_port_flow
from pda.model import Cojob, FlowSpec, Job

log = logging.getLogger("grouper.coordinator")


@dataclass(frozen=True)
class ReportedFlow:
    flow_id: str
    src_host: str
    dst_host: str
    bytes_per_iteration: float


@dataclass(frozen=True, eq=False)
class ReportedJob:
    """A validated registration, as one agent reported it (no progress)."""

    cojob_id: str
    job_id: str
    arch: str
    stage_iterations: tuple[int, ...]
    model_bytes: float
    compute_time: float
    arrival: float
    flows: dict[str, ReportedFlow] = field(default_factory=dict)

    @cached_property
    def key(self) -> tuple[str, str]:
        return (self.cojob_id, self.job_id)

    @cached_property
    def total_iterations(self) -> int:
        return sum(self.stage_iterations)


class JobReport(NamedTuple):
    """Progress of one reported job (a tuple: tens of thousands are made per cycle)."""

    job: ReportedJob
    iterations_done: int = 0
    finished: bool = False


@dataclass
class Model:
    """What the scheduler sees, and the flow id of every snapshot flow row."""

    hosts: tuple[str, ...]
    cojobs: list[Cojob]
    flow_ids: list[str]  # parallel to the snapshot's flow rows
    flow_src: list[str]
    # per flow row: (receiving host, its inbound key) for port-matched flows, else None
    flow_inbound: list[tuple[str, str] | None] = field(default_factory=list)


@dataclass
class _Built:
    parts: tuple[ReportedJob, ...]  # held so their ids stay unique while cached
    arrival: float
    flows: tuple[FlowSpec, ...]
    ids: list[str]
    src: list[str]
    inbound: list[tuple[str, str] | None]
    job: Job | None = None  # the last Job built from these parts (immutable; reused)


class MergeCache:
    def __init__(self) -> None:
        self.entries: dict[tuple[int, ...], _Built] = {}
        self.cojobs: dict[str, Cojob] = {}  # last cycle's, reused while nothing changed


def merge_reports(
    reports: dict[str, list[JobReport]],
    hosts: tuple[str, ...],
    stage_started: dict[tuple[str, int], float] | None = None,
    cache: MergeCache | None = None,
) -> Model:
    """Merge per-host job reports into cojobs. Flows naming hosts outside the config
    are dropped (logged): the coordinator only schedules hosts of its config."""
    known = set(hosts)
    parts: dict[tuple[str, str], list[JobReport]] = {}
    for host in sorted(reports):
        for jr in reports[host]:
            group = parts.get(jr.job.key)
            if group is None:
                parts[jr.job.key] = [jr]
            else:
                group.append(jr)

    cache = cache or MergeCache()
    used: dict[tuple[int, ...], _Built] = {}
    by_cojob: dict[str, list[tuple[ReportedJob, int, float, _Built]]] = {}
    for cid, jid in sorted(parts):
        reps = parts[cid, jid]
        finished = False
        done = reps[0].iterations_done
        for r in reps:
            finished = finished or r.finished
            if r.iterations_done < done:
                done = r.iterations_done
        if finished:
            continue
        key = tuple([id(r.job) for r in reps])
        built = used.get(key) or cache.entries.get(key)
        if built is None:
            built = _build(tuple(r.job for r in reps), known)
        used[key] = built
        if built.flows:
            by_cojob.setdefault(cid, []).append((reps[0].job, done, built.arrival, built))
    cache.entries = used

    cojobs: list[Cojob] = []
    flow_ids: list[str] = []
    flow_src: list[str] = []
    flow_inbound: list[tuple[str, str] | None] = []
    for cid in sorted(by_cojob, key=lambda c: (min(m[2] for m in by_cojob[c]), c)):
        members = by_cojob[cid]
        stages = max((m[0].stage_iterations for m in members), key=len)
        total = sum(stages)
        jobs = []
        for rj, done, _, built in members:
            done = min(done, total)
            if built.job is None or built.job.done != done:  # immutable: rebuilt on progress
                built.job = Job(
                    rj.job_id, "flows", built.flows, compute_time=rj.compute_time, done=done
                )
            jobs.append(built.job)
            flow_ids += built.ids
            flow_src += built.src
            flow_inbound += built.inbound
        started = tuple(
            (stage_started or {}).get((cid, k + 1), math.inf) for k in range(len(stages))
        )
        arrival = min(m[2] for m in members)
        cojob = cache.cojobs.get(cid)  # reused while it holds the very same jobs
        if (
            cojob is None
            or (cojob.stage_iterations, cojob.arrival, cojob.stage_started)
            != (stages, arrival, started)
            or len(cojob.jobs) != len(jobs)
            or any(a is not b for a, b in zip(cojob.jobs, jobs, strict=True))
        ):
            cojob = Cojob(cid, stages, tuple(jobs), arrival, started)
        cojobs.append(cojob)
    cache.cojobs = {c.cojob_id: c for c in cojobs}
    return Model(hosts, cojobs, flow_ids, flow_src, flow_inbound)


def _build(parts: tuple[ReportedJob, ...], known: set[str]) -> _Built:
    first = parts[0]
    for p in parts[1:]:
        if p.stage_iterations != first.stage_iterations:
            log.warning(
                "job %s/%s: hosts disagree on stages %s vs %s; using the first",
                first.cojob_id,
                first.job_id,
                first.stage_iterations,
                p.stage_iterations,
            )
    # a flow id is unique on its sending host only (two workers push to the same
    # server port under the same id), so flows are keyed by (source host, flow id)
    flows: dict[tuple[str, str], ReportedFlow] = {}
    for p in parts:
        for fid, f in p.flows.items():
            if f.src_host not in known or f.dst_host not in known:
                log.warning("flow %s names a host outside the config; ignored", fid)
                continue
            flows.setdefault((f.src_host, fid), f)
    ordered = [flows[k] for k in sorted(flows)]
    return _Built(
        parts,
        min(p.arrival for p in parts),
        tuple(FlowSpec(f.src_host, f.dst_host, f.bytes_per_iteration) for f in ordered),
        [f.flow_id for f in ordered],
        [f.src_host for f in ordered],
        [inbound_of(f.flow_id, f.src_host) for f in ordered],
    )


def inbound_of(fid: str, src: str) -> tuple[str, str] | None:
    """(receiving host, its inbound key) of a port-matched flow id; None for host flows."""
    parsed = parse_port_flow(fid)
    if parsed is None:
        return None
    dst, port, by_source = parsed
    return dst, inbound_key(src, port, by_source)
