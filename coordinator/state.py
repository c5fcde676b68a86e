"""What the coordinator holds of one agent: its jobs, merged from numbered updates (pure).

Updates of one agent process (one epoch) are numbered 1, 2, ...; a delta applies only
to the state after the update before it. Anything else is a gap: the coordinator asks
for a full update (a *sync*) and ignores deltas until it arrives. A message that was
lost or came late can therefore never leave a job wrong: at worst it costs a resync,
and the agent's heartbeat (an update at least every few seconds, numbered like the
rest) reveals a gap even when nothing else changes.
Registrations are validated once: a job whose registration bytes did not change keeps
its validated template, so a progress update costs a dictionary lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from grouper.common.errors import ConfigError, short
from grouper.common.registration import parse_registration, registration_dict
from grouper.coordinator.snapshot import JobReport, ReportedFlow, ReportedJob
from grouper.v1 import agent_pb2 as pb

JobKey = tuple[str, str]
Verdict = Literal["applied", "stale", "gap"]


@dataclass
class AgentState:
    host: str
    epoch: int = 0
    seq: int = 0
    awaiting_full: bool = True  # after (re)connecting or a gap, until a full update
    plan_version: int = 0
    priorities_active: bool = False
    jobs: dict[JobKey, tuple[bytes, JobReport]] = field(default_factory=dict)
    dirty: set[JobKey] = field(default_factory=set)  # jobs changed since take_dirty()
    finished: set[JobKey] = field(default_factory=set)  # jobs held that reported an end
    _reports: list[JobReport] | None = None

    def reset(self) -> None:
        """Hold nothing until the next full update (a new stream, or a config reload)."""
        self.awaiting_full = True

    def reports(self) -> list[JobReport]:
        if self._reports is None:
            self._reports = [r for _, r in self.jobs.values()]
        return self._reports

    def clear(self) -> None:
        self.dirty.update(self.jobs)
        self.jobs, self._reports, self.finished = {}, None, set()

    def take_dirty(self) -> tuple[dict[JobKey, JobReport], set[JobKey]]:
        """The jobs held now, and which of them changed (or went) since the last call."""
        dirty, self.dirty = self.dirty, set()
        jobs = self.jobs
        return {k: jobs[k][1] for k in dirty if k in jobs}, dirty

    def apply(self, up: pb.StateUpdate, known_hosts: set[str]) -> tuple[Verdict, list[str]]:
        """Merge one update; returns the verdict and the jobs refused (field named)."""
        if up.host != self.host:
            raise ConfigError("update.host", f"agent for {self.host!r} reported as {up.host!r}")
        if up.full:
            if not self.awaiting_full and up.epoch == self.epoch and up.seq <= self.seq:
                return "stale", []  # an older full update than the state held
            jobs: dict[JobKey, tuple[bytes, JobReport]] = {}
            errors = self._merge(up.jobs, jobs, known_hosts)
            self.dirty.update(self.jobs.keys() ^ jobs.keys())
            self.dirty.update(k for k, v in jobs.items() if self.jobs.get(k) != v)
            self.jobs, self._reports, self.awaiting_full = jobs, None, False
            self.finished = {k for k, (_, r) in jobs.items() if r.finished}
        else:
            if self.awaiting_full:  # a diff against a state not held; should it be newer
                return "stale", []  # than the full update, the next heartbeat shows the gap
            if up.epoch != self.epoch or up.seq > self.seq + 1:
                self.awaiting_full = True
                return "gap", []
            if up.seq <= self.seq:
                return "stale", []
            errors = self._merge(up.jobs, self.jobs, known_hosts, delta=True)
            for k in up.removed:
                self.jobs.pop((k.cojob_id, k.job_id), None)
                self.dirty.add((k.cojob_id, k.job_id))
                self.finished.discard((k.cojob_id, k.job_id))
            self._reports = None
        self.epoch, self.seq = up.epoch, up.seq
        self.plan_version, self.priorities_active = up.plan_version, up.priorities_active
        return "applied", errors

    def _merge(
        self, states: list[pb.JobState], into: dict[JobKey, tuple[bytes, JobReport]],
        known_hosts: set[str], *, delta: bool = False,
    ) -> list[str]:  # fmt: skip
        """Each job state into ``into``; with ``delta`` (``into`` is the state held) each
        job is marked dirty and the finished set kept in step, in the same pass: on a
        cluster every job progresses, so this runs for every job every period."""
        errors = []
        held_get, dirty, finished = self.jobs.get, self.dirty, self.finished
        for i, js in enumerate(states):
            if not js.HasField("job"):  # by its key: the registration held for it
                k = js.key
                key = (k.cojob_id, k.job_id)
                held = held_get(key)
                if held is None or not delta:
                    errors.append(
                        f"update.jobs[{i}].job: missing, and no registration held for "
                        f"{short(key[0])}/{short(key[1])} (never sent whole, or refused)"
                    )
                    template = None
                else:
                    raw, template = held[0], held[1].job
            else:
                job = js.job
                key = (job.cojob_id, job.job_id)
                raw = job.SerializeToString(deterministic=True)
                held = held_get(key)
                if held is not None and held[0] == raw:
                    template = held[1].job
                else:
                    checked = _validate_job(job, self.host, known_hosts)
                    template = None if isinstance(checked, str) else checked
                    if template is None:
                        errors.append(f"update.jobs[{i}].{checked}")
            done = js.iterations_done
            if template is not None and done > template.total_iterations:
                total = template.total_iterations
                errors.append(f"update.jobs[{i}].iterations_done: exceeds {total}: {done}")
                template = None
            if template is None:
                into.pop(key, None)
                fin = False
            else:
                fin = js.finished
                into[key] = (raw, JobReport(template, done, fin))
            if delta:
                dirty.add(key)
                if fin:
                    finished.add(key)
                else:
                    finished.discard(key)
        return errors


def _validate_job(job: pb.JobRegistration, host: str, known_hosts: set[str]) -> ReportedJob | str:
    try:
        entry = parse_registration(registration_dict(job), known_hosts)
    except ConfigError as exc:
        return str(exc)
    flows = {}
    for f in entry.flows:
        if f.src_host != host:
            continue  # an agent speaks for the flows its host sends
        fid = f.flow_id(entry.cojob_id, entry.job_id)
        flows[fid] = ReportedFlow(fid, f.src_host, f.dst_host, f.bytes_per_iteration)
    return ReportedJob(
        entry.cojob_id,
        entry.job_id,
        entry.arch,
        tuple(entry.stage_iterations),
        entry.model_bytes,
        entry.compute_time,
        entry.arrival,
        flows,
        entry.weight,
    )
