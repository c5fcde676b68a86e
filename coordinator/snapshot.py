"""Agents' reports -> the scheduling model (pure).

Each agent reports the jobs its local participants registered, with the flows they
send. A job spread over several hosts is merged by (cojob, job): flows are united by
flow id, progress is the slowest participant's, and a job any participant reported
finished is gone. Every job is assumed to run all its remaining stages (online).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from pda.model import Cojob, FlowSpec, Job

log = logging.getLogger("grouper.coordinator")


@dataclass(frozen=True)
class ReportedFlow:
    flow_id: str
    src_host: str
    dst_host: str
    bytes_per_iteration: float


@dataclass
class ReportedJob:
    cojob_id: str
    job_id: str
    arch: str
    stage_iterations: tuple[int, ...]
    model_bytes: float
    compute_time: float
    arrival: float
    iterations_done: int
    finished: bool
    flows: dict[str, ReportedFlow] = field(default_factory=dict)


@dataclass
class Model:
    """What the scheduler sees, and the flow id of every snapshot flow row."""

    hosts: tuple[str, ...]
    cojobs: list[Cojob]
    flow_ids: list[str]  # parallel to the snapshot's flow rows
    flow_src: list[str]


def merge_reports(
    reports: dict[str, list[ReportedJob]],
    hosts: tuple[str, ...],
    stage_started: dict[tuple[str, int], float] | None = None,
) -> Model:
    """Merge per-host job reports into cojobs. Unknown hosts in flows are dropped
    (logged): the coordinator only schedules hosts of its config."""
    known = set(hosts)
    jobs: dict[tuple[str, str], ReportedJob] = {}
    for host in sorted(reports):
        for rj in reports[host]:
            key = (rj.cojob_id, rj.job_id)
            cur = jobs.get(key)
            if cur is None:
                cur = ReportedJob(
                    rj.cojob_id,
                    rj.job_id,
                    rj.arch,
                    rj.stage_iterations,
                    rj.model_bytes,
                    rj.compute_time,
                    rj.arrival,
                    rj.iterations_done,
                    rj.finished,
                )
                jobs[key] = cur
            else:
                if cur.stage_iterations != rj.stage_iterations:
                    log.warning(
                        "job %s/%s: hosts disagree on stages %s vs %s; using the first",
                        rj.cojob_id,
                        rj.job_id,
                        cur.stage_iterations,
                        rj.stage_iterations,
                    )
                cur.iterations_done = min(cur.iterations_done, rj.iterations_done)
                cur.finished = cur.finished or rj.finished
                cur.arrival = min(cur.arrival, rj.arrival)
            for fid, f in rj.flows.items():
                if f.src_host not in known or f.dst_host not in known:
                    log.warning("flow %s names a host outside the config; ignored", fid)
                    continue
                cur.flows.setdefault(fid, f)

    by_cojob: dict[str, list[ReportedJob]] = {}
    for (cid, _), rj in sorted(jobs.items()):
        if not rj.finished and rj.flows:
            by_cojob.setdefault(cid, []).append(rj)
    cojobs: list[Cojob] = []
    flow_ids: list[str] = []
    flow_src: list[str] = []
    order = sorted(by_cojob, key=lambda c: (min(j.arrival for j in by_cojob[c]), c))
    for cid in order:
        members = by_cojob[cid]
        stages = max((j.stage_iterations for j in members), key=len)
        model_jobs = []
        for rj in members:
            fl = sorted(rj.flows.values(), key=lambda f: f.flow_id)
            model_jobs.append(
                Job.explicit(
                    rj.job_id,
                    [FlowSpec(f.src_host, f.dst_host, f.bytes_per_iteration) for f in fl],
                    done=min(rj.iterations_done, sum(stages)),
                    compute_time=rj.compute_time,
                )
            )
            flow_ids += [f.flow_id for f in fl]
            flow_src += [f.src_host for f in fl]
        arrival = min(j.arrival for j in members)
        started = tuple(
            (stage_started or {}).get((cid, k + 1), math.inf) for k in range(len(stages))
        )
        cojobs.append(Cojob(cid, tuple(stages), tuple(model_jobs), arrival, started))
    return Model(hosts, cojobs, flow_ids, flow_src)
