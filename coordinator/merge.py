"""Agents' reports -> the scheduling model, kept across cycles (pure).

Each agent reports the jobs its local participants registered, with the flows they
send. A job spread over several hosts is merged by (cojob, job): flows are united by
(sending host, flow id), progress is the slowest participant's, and a job any
participant reported finished is gone. Every job is assumed to run all its remaining
stages (online).

The :class:`Merger` keeps every host's part of every job and redoes only what changed:
the jobs named by :meth:`Merger.set_host`, and the cojobs holding them or whose stages
started. Registrations are immutable once accepted, so a job's flows are built once
per set of validated templates (:class:`_Built`); unchanged cojobs keep their
:class:`Cojob` objects, which the snapshot's caches key on. Progress is kept apart,
in the model's ``job_done`` array (the jobs carry 0): on a cluster every running job
progresses every period, and a job's progress then costs one write into the array,
not a new job and cojob.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import chain

import numpy as np

from grouper.common.flows import host_flow_id, inbound_key, parse_port_flow
from grouper.coordinator.snapshot import JobReport, Model, ReportedFlow, ReportedJob
from grouper.pda.model import Cojob, FlowSpec, Job

log = logging.getLogger("grouper.coordinator")

JobKey = tuple[str, str]


@dataclass
class _Built:
    parts: tuple[ReportedJob, ...]  # held so their ids stay unique while cached
    arrival: float
    flows: tuple[FlowSpec, ...]
    ids: list[str]
    src: list[str]
    inbound_dst: list[int]  # receiving host's index for port-matched flows, else -1
    inbound_key: list[str]
    job: Job | None = None  # the Job built from these parts (done 0: progress is apart)


@dataclass
class _Member:
    """A job as merged from its hosts' parts, in its cojob."""

    template: ReportedJob
    done: int
    built: _Built


@dataclass
class _CojobEntry:
    cojob: Cojob
    members: list[_Member]  # in job id order
    total: int  # iterations of all its stages: a job's progress is counted up to it
    builts: list[_Built]  # its jobs' flows, in member order
    ids: list[str]
    src: list[str]
    inbound_dst: list[int]
    inbound_key: list[str]


class Merger:
    def __init__(self, hosts: tuple[str, ...]) -> None:
        self.hosts = hosts
        self.known = {h: i for i, h in enumerate(hosts)}
        self.parts: dict[JobKey, dict[str, JobReport]] = {}
        self.built: dict[JobKey, tuple[tuple[int, ...], _Built]] = {}  # by template ids
        self.members: dict[str, dict[str, _Member]] = {}  # cojob -> job -> member
        self.entries: dict[str, _CojobEntry] = {}
        self.dirty_jobs: set[JobKey] = set()  # their hosts, templates or ends changed
        self.progressed: set[JobKey] = set()  # only the iterations done of some host
        self.moved: set[JobKey] = set()  # jobs whose progress (min over hosts) changed
        self.dirty_cojobs: set[str] = set()
        self.regrouped: set[str] = set()  # cojobs whose members changed (not only progress)
        self.touched: set[str] = set()  # cojobs whose stage start times changed
        self.restructured = False  # a cojob came, went or changed its flow rows
        self.order: list[str] = []  # cojob ids by (arrival, id)
        self.position: dict[str, int] = {}  # and where each is in it
        self.row: dict[JobKey, int] = {}  # each scheduled job's entry in ``done``
        self.done = np.zeros(0, np.int64)  # their progress, as the model's ``job_done``
        self.last: Model | None = None

    def set_host(self, host: str, jobs: dict[JobKey, JobReport], changed: Iterable[JobKey]) -> None:
        """Take ``host``'s current report of each job in ``changed`` (absent: gone)."""
        parts, progressed, dirty = self.parts, self.progressed, self.dirty_jobs
        for key in changed:
            group = parts.get(key)
            r = jobs.get(key)
            if r is None:
                if group is not None:
                    group.pop(host, None)
                    if not group:
                        del parts[key]
            elif group is None:
                parts[key] = {host: r}
            else:
                old = group.get(host)
                group[host] = r
                if old is not None and old.job is r.job and not (old.finished or r.finished):
                    progressed.add(key)  # the same registration: only progress moved
                    continue
            dirty.add(key)

    def touch(self, cojob_id: str) -> None:
        """Rebuild a cojob at the next model (its stage start times changed)."""
        self.dirty_cojobs.add(cojob_id)
        self.touched.add(cojob_id)

    def model(self, stage_started: dict[tuple[str, int], float] | None = None) -> Model:
        for key in self.dirty_jobs:
            self._merge_job(key)
        self._progress(self.progressed - self.dirty_jobs)
        self.dirty_jobs, self.progressed = set(), set()
        started = stage_started or {}
        rebuilt = self.dirty_cojobs
        for cid in rebuilt:
            self._build_cojob(cid, started)
        self.dirty_cojobs, self.regrouped, self.touched = set(), set(), set()
        entries = self.entries
        last = self.last
        if last is None or self.restructured:  # cojobs came, went or changed flows
            self.order = sorted(entries, key=lambda c: (entries[c].cojob.arrival, c))
            self.position = {c: i for i, c in enumerate(self.order)}
            order = [entries[c] for c in self.order]
            self._index(order)
            last = Model(
                self.hosts,
                [e.cojob for e in order],
                list(chain.from_iterable(e.ids for e in order)),
                list(chain.from_iterable(e.src for e in order)),
                list(chain.from_iterable(e.inbound_dst for e in order)),
                list(chain.from_iterable(e.inbound_key for e in order)),
                job_done=self.done.copy(),
            )
        else:  # the same flow rows (the same lists, which callers may key on)
            cojobs = list(last.cojobs)  # and the cojobs rebuilt written in
            for cid in rebuilt:
                at = self.position.get(cid)  # none: a cojob never scheduled (no flows)
                if at is not None:
                    cojobs[at] = entries[cid].cojob
                    self.moved.update((cid, m.template.job_id) for m in entries[cid].members)
            self._write_moved()
            last = dataclasses.replace(last, cojobs=cojobs, job_done=self.done.copy())
        self.moved = set()
        self.last, self.restructured = last, False
        return last

    def _index(self, order: list[_CojobEntry]) -> None:
        """Each job's entry in the progress array, and the array, anew."""
        self.row = {
            (e.cojob.cojob_id, m.template.job_id): i
            for i, (e, m) in enumerate((e, m) for e in order for m in e.members)
        }
        self.done = np.fromiter(
            (min(m.done, e.total) for e in order for m in e.members), np.int64, len(self.row)
        )

    def _write_moved(self) -> None:
        """The progress of the jobs that moved, into the array (same rows as before)."""
        for key in self.moved:
            at = self.row.get(key)
            member = self.members.get(key[0], {}).get(key[1])
            if at is not None and member is not None:
                self.done[at] = min(member.done, self.entries[key[0]].total)

    def _merge_job(self, key: JobKey) -> None:
        cid, jid = key
        group = self.parts.get(key)
        member = None
        if group:
            reps = [group[h] for h in sorted(group)]
            ids = tuple([id(r.job) for r in reps])
            held = self.built.get(key)
            if held is None or held[0] != ids:  # flows built once per set of templates
                parts = tuple(r.job for r in reps)
                held = self.built[key] = (ids, _build(parts, self.known, tuple(sorted(group))))
            if not any(r.finished for r in reps) and held[1].flows:
                done = min(r.iterations_done for r in reps)
                member = _Member(reps[0].job, done, held[1])
        else:
            self.built.pop(key, None)
        jobs = self.members.get(cid)
        if member is not None:
            self.members.setdefault(cid, {})[jid] = member
        elif jobs is not None:
            jobs.pop(jid, None)
            if not jobs:
                del self.members[cid]
        self.dirty_cojobs.add(cid)
        self.regrouped.add(cid)

    def _progress(self, keys: set[JobKey]) -> None:
        """Jobs whose hosts only reported progress: each its slowest host's count."""
        members, parts, moved = self.members, self.parts, self.moved
        for key in keys:
            member = members.get(key[0], {}).get(key[1])
            if member is None:  # not scheduled (no flows between known hosts)
                continue
            done = min([r.iterations_done for r in parts[key].values()])
            if done != member.done:
                member.done = done
                moved.add(key)

    def _build_cojob(self, cid: str, started_at: dict[tuple[str, int], float]) -> None:
        jobs = self.members.get(cid)
        if not jobs:
            if self.entries.pop(cid, None) is not None:
                self.restructured = True
            return
        old = self.entries.get(cid)
        members = [jobs[j] for j in sorted(jobs)]
        stages = max((m.template.stage_iterations for m in members), key=len)
        arrival = min(m.built.arrival for m in members)
        total = sum(stages)
        built_jobs = []
        for m in members:
            b = m.built
            if b.job is None:  # immutable, and progress is apart: built once
                t = m.template
                b.job = Job(t.job_id, "flows", b.flows, compute_time=t.compute_time,
                            weight=t.weight)  # fmt: skip
            built_jobs.append(b.job)
        started = tuple([started_at.get((cid, k + 1), math.inf) for k in range(len(stages))])
        if (
            old is not None
            and (old.cojob.stage_iterations, old.cojob.arrival, old.cojob.stage_started)
            == (stages, arrival, started)
            and len(old.cojob.jobs) == len(built_jobs)
            and all(a is b for a, b in zip(old.cojob.jobs, built_jobs, strict=True))
        ):
            old.members = members  # the very same jobs: keep the cojob object (model()
            return  # writes the progress of every rebuilt cojob's members)
        cojob = Cojob(cid, stages, tuple(built_jobs), arrival, started)
        builts = [m.built for m in members]
        if (
            old is not None
            and len(old.builts) == len(builts)
            and all(a is b for a, b in zip(old.builts, builts, strict=True))
        ):  # progress only: the same flow rows
            self.entries[cid] = _CojobEntry(
                cojob, members, total, builts, old.ids, old.src, old.inbound_dst, old.inbound_key
            )
            return
        self.restructured = True
        self.entries[cid] = _CojobEntry(
            cojob,
            members,
            total,
            builts,
            [i for b in builts for i in b.ids],
            [s for b in builts for s in b.src],
            [x for b in builts for x in b.inbound_dst],
            [x for b in builts for x in b.inbound_key],
        )


def merge_reports(
    reports: dict[str, list[JobReport]],
    hosts: tuple[str, ...],
    stage_started: dict[tuple[str, int], float] | None = None,
) -> Model:
    """The model of these reports, merged from scratch. Flows naming hosts outside the
    config are dropped (logged): the coordinator only schedules hosts of its config."""
    merger = Merger(hosts)
    for host in sorted(reports):
        jobs = {r.job.key: r for r in reports[host]}
        merger.set_host(host, jobs, jobs)
    return merger.model(stage_started)


def _build(
    parts: tuple[ReportedJob, ...], known: dict[str, int], hosts: tuple[str, ...] = ()
) -> _Built:
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
    flows = flows or _ring_prior(parts, [h for h in hosts if h in known])
    ordered = [flows[k] for k in sorted(flows)]
    inbound = [inbound_of(f.flow_id, f.src_host) for f in ordered]
    return _Built(
        parts,
        min(p.arrival for p in parts),
        tuple(FlowSpec(f.src_host, f.dst_host, f.bytes_per_iteration) for f in ordered),
        [f.flow_id for f in ordered],
        [f.src_host for f in ordered],
        [known[x[0]] if x is not None and x[0] in known else -1 for x in inbound],
        [x[1] if x is not None else "" for x in inbound],
    )


def _ring_prior(
    parts: tuple[ReportedJob, ...], hosts: list[str]
) -> dict[tuple[str, str], ReportedFlow]:
    """A ring all-reduce job that declared its model size but reported no flow yet (its
    connections are not up, so no agent knows its peers): its hosts, in name order, as
    the ring, each sending 2(W-1)/W of the model per iteration to the next. Its stages
    are then ordered from registration, not from its first connections; the flows the
    agents measure replace these as soon as they report them. Host flows, so the agents
    accept them for a job known by its processes or its cgroup."""
    first = parts[0]
    if len(hosts) < 2 or any(p.arch != "ring" or p.model_bytes <= 0 for p in parts):
        return {}
    w = len(hosts)
    size = 2 * (w - 1) / w * first.model_bytes
    out = {}
    for i, src in enumerate(hosts):
        dst = hosts[(i + 1) % w]
        fid = host_flow_id(first.cojob_id, first.job_id, dst)
        out[(src, fid)] = ReportedFlow(fid, src, dst, size)
    return out


def inbound_of(fid: str, src: str) -> tuple[str, str] | None:
    """(receiving host, its inbound key) of a port-matched flow id; None for host flows."""
    parsed = parse_port_flow(fid)
    if parsed is None:
        return None
    dst, port, by_source = parsed
    return dst, inbound_key(src, port, by_source)
