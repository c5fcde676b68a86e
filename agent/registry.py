"""Jobs running on this host, as their participants report them.

Input arrives as plain mappings (from gRPC messages or JSON-lines events) and is
validated here, with errors naming the field. The registry is persisted with atomic
writes (temp file + rename) so an agent restart loses nothing.

A job names its traffic in one of two ways: flows with ports (classified by destination
address and port), or the process ids of its participants on this host, whose TCP
connections the agent then finds itself (``agent.discovery``); a flow without ports
(a *host flow*) declares the bytes per iteration toward a host for such a job.
Finished jobs stay ``FINISHED_GRACE`` seconds (the coordinator must see them end), then
leave the registry and the state file.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from grouper.agent import ownership as own
from grouper.agent.cgroups import Cgroups, JobCgroups, job_cgroup_name
from grouper.agent.discovery import procs as P
from grouper.agent.peers import ROOT, Caller
from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.common.registration import Flow, JobEntry, parse_registration
from grouper.common.registry_policy import RegistryPolicy

FINISHED_GRACE = 300.0  # seconds a finished job stays visible

EVENT_KINDS = ("REGISTERED", "STAGE_STARTED", "STAGE_FINISHED", "JOB_FINISHED", "FLOWS_CHANGED")


@dataclass(frozen=True)
class Event:
    kind: str
    cojob_id: str
    job_id: str
    stage: int
    time: float = field(default_factory=time.time)


_JOB_FIELDS = tuple(f.name for f in fields(JobEntry))
_FLOW_FIELDS = tuple(f.name for f in fields(Flow))


def _plain(job: JobEntry) -> dict[str, Any]:
    """``asdict(job)`` without its deep copies: what the state file holds of a job."""
    d = {name: getattr(job, name) for name in _JOB_FIELDS}
    d["flows"] = [{name: getattr(f, name) for name in _FLOW_FIELDS} for f in job.flows]
    return d


class Registry:
    """Local jobs keyed by (cojob, job). Every change returns the events it causes."""

    def __init__(
        self,
        state_file: str | Path | None = None,
        known_hosts: set[str] | None = None,
        *,
        host: str | None = None,
        host_of: dict[str, str] | None = None,
        own_pid: int | None = None,
        cgroups: Cgroups | None = None,
        no_cgroups: str = "no cgroup v2 mount",
        policy: RegistryPolicy | None = None,
    ) -> None:
        self.policy = policy or RegistryPolicy()
        self.admin_gid = self.policy.admin_gid()
        self.own_pid = os.getpid() if own_pid is None else own_pid  # never a job's
        self.cgroups = cgroups  # None: this host cannot know jobs by cgroup
        self.no_cgroups = no_cgroups  # why not, when it cannot
        self.job_cgroups = JobCgroups(cgroups) if cgroups is not None else None
        self.jobs: dict[tuple[str, str], JobEntry] = {}
        self.generation = 0  # grows with every change
        self.known_hosts = known_hosts
        self.host = host
        self.host_of = host_of or {}
        self.state_file = Path(state_file) if state_file else None
        self._encoded: dict[tuple[str, str], str] = {}  # each job's JSON in the state file
        if self.state_file and self.state_file.exists():
            self._load()

    # -- changes ---------------------------------------------------------------------
    def register(self, data: Any, caller: Caller = ROOT) -> list[Event]:
        """A new job, another participant of a known job, or (for a job known by its
        processes) a newer declaration of its load: arch, model size and host flows may
        change, its stages may not. ``caller`` may name only its own processes, cgroup
        and jobs (agent.ownership)."""
        entry = parse_registration(
            data, self.known_hosts, local_host=self.host, host_of=self.host_of
        )
        old = self.jobs.get(entry.key)
        own.check_job(old, caller)
        held = 0 if old is not None else self.held_by(caller.uid)
        own.check_register(entry, caller, self.policy, held, self.admin_gid)
        mine = {p for p, _ in old.pids} if old is not None and not old.finished else set()
        own.check_pids_count(len(mine | {p for p, _ in entry.pids}), caller, self.policy)
        entry.owner = caller.uid if old is None else old.owner
        known_by_pids = old is not None and bool(old.pids or old.cgroup) and not old.finished
        by_procs = bool(entry.pids or entry.cgroup) or known_by_pids
        if not entry.flows and not by_procs:
            raise ConfigError("flows", "give flows with ports, the job's pids, or its cgroup")
        for i, f in enumerate(entry.flows):
            if f.host_flow and not by_procs:
                raise ConfigError(f"flows[{i}].dst_port", "required (or give src_port, or pids)")
        self._own_cgroup_path(entry, old)
        self._check_cgroup(entry, old)
        entry.pids = self._check_pids(entry)
        if entry.own_cgroup and self.job_cgroups is not None:
            try:
                self.job_cgroups.enter(entry.cgroup, [p for p, _ in entry.pids])
            except OSError as exc:
                raise ConfigError("own_cgroup", f"cannot make {entry.cgroup!r}: {exc}") from None
        if old is None:
            self.jobs[entry.key] = entry
            self._save(entry.key)
            return [
                Event("REGISTERED", entry.cojob_id, entry.job_id, 0),
                Event("STAGE_STARTED", entry.cojob_id, entry.job_id, 1),
            ]
        if known_by_pids and old.spec() != entry.spec():
            return self._redeclare(old, entry)
        if old.spec() != entry.spec():
            raise ConfigError(
                "job_id",
                f"job {entry.cojob_id}/{entry.job_id} is already registered with a different spec",
            )
        self._join(old, entry)
        return []  # idempotent re-registration (e.g. a JSON-lines file read again)

    def _join(self, old: JobEntry, entry: JobEntry) -> None:
        added = [p for p in entry.pids if p not in old.pids]
        if added and not old.finished:  # another participant of the job (a second rank)
            old.pids += added
            self._save(old.key)
        if entry.cgroup and not old.cgroup and not old.finished:
            old.cgroup, old.own_cgroup = entry.cgroup, entry.own_cgroup
            self._save(old.key)

    def _own_cgroup_path(self, entry: JobEntry, old: JobEntry | None) -> None:
        """``own_cgroup``: the job's cgroup is one the agent makes (checked here, made
        once every other check passed)."""
        if not entry.own_cgroup:
            return
        if entry.cgroup:
            raise ConfigError("own_cgroup", "give cgroup or own_cgroup, not both")
        if not entry.pids:
            raise ConfigError("own_cgroup", "needs the pids to move into the job's cgroup")
        if self.cgroups is None or self.job_cgroups is None:
            raise ConfigError("own_cgroup", f"jobs known by pids only here: {self.no_cgroups}")
        entry.cgroup = job_cgroup_name(entry.cojob_id, entry.job_id)
        if old is not None and not old.finished and old.cgroup == entry.cgroup:
            return  # another rank of the job: it joins the job's cgroup
        if os.path.isdir(self.cgroups.directory(entry.cgroup)):
            raise ConfigError("own_cgroup", f"{entry.cgroup!r} exists and is not this job's")

    def _check_cgroup(self, entry: JobEntry, old: JobEntry | None) -> None:
        """A job's cgroup exists, is below cgroup2's mount, and holds no other job (nor
        lies above or below one): refused naming ``cgroup`` otherwise."""
        if not entry.cgroup or entry.own_cgroup:
            return
        if self.cgroups is None:
            raise ConfigError("cgroup", f"jobs known by pids only here: {self.no_cgroups}")
        if old is not None and old.cgroup and old.cgroup != entry.cgroup and not old.finished:
            raise ConfigError("cgroup", f"job {old.cojob_id}/{old.job_id} is in {old.cgroup!r}")
        self.cgroups.resolve(entry.cgroup, "cgroup")
        mine = entry.cgroup + "/"
        for j in self.active_jobs():
            if j.key == entry.key or not j.cgroup:
                continue
            theirs = j.cgroup + "/"
            if mine.startswith(theirs) or theirs.startswith(mine):
                raise ConfigError(
                    "cgroup", f"{entry.cgroup[:80]!r} overlaps job {j.cojob_id}/{j.job_id}'s"
                )

    def by_cgroup(self, path: str) -> JobEntry | None:
        """The active job in cgroup ``path``."""
        for j in self.active_jobs():
            if j.cgroup == path:
                return j
        return None

    def _redeclare(self, old: JobEntry, entry: JobEntry) -> list[Event]:
        if entry.stage_iterations != old.stage_iterations:
            raise ConfigError(
                "stage_iterations",
                f"job {old.cojob_id}/{old.job_id} runs {old.stage_iterations}; they cannot change",
            )
        if any(not f.host_flow for f in entry.flows):
            raise ConfigError("flows", "a job known by its pids declares flows without ports")
        declared = {f.dst_host: f for f in old.flows if f.host_flow}
        declared.update({f.dst_host: f for f in entry.flows})
        old.flows = [f for f in old.flows if not f.host_flow] + list(declared.values())
        if entry.model_bytes > 0:
            old.arch, old.model_bytes = entry.arch, entry.model_bytes
        self._join(old, entry)
        self._save(old.key)
        return [Event("FLOWS_CHANGED", old.cojob_id, old.job_id, 0)]

    def _check_pids(self, entry: JobEntry) -> list[tuple[int, int]]:
        """Live (pid, start time) of the registration's pids, or a refusal naming one."""
        taken = {
            p[0]: j.key
            for j in self.jobs.values()
            if not j.finished and j.key != entry.key
            for p in j.pids
            if P.alive(P.Proc(*p))
        }
        out = []
        for i, (pid, _) in enumerate(entry.pids):
            if pid == self.own_pid:
                raise ConfigError(f"pids[{i}]", f"{pid} is the agent's own process")
            proc = P.identify(pid)
            if proc is None:
                raise ConfigError(f"pids[{i}]", f"no running process {pid}")
            if pid in taken:
                c, j = taken[pid]
                raise ConfigError(f"pids[{i}]", f"process {pid} belongs to job {c}/{j}")
            out.append((proc.pid, proc.start))
        return out

    def held_by(self, uid: int) -> int:
        """Active jobs registered by ``uid``."""
        return sum(1 for j in self.active_jobs() if j.owner == uid)

    def progress(self, data: Any, caller: Caller = ROOT) -> list[Event]:
        m = v.mapping(data, "", ("cojob_id", "job_id", "iterations_done"))
        job = self._job(m, caller)
        done = v.integer(v.get(m, "iterations_done", ""), "iterations_done", minimum=0)
        total = sum(job.stage_iterations)
        if done > total:
            raise ConfigError("iterations_done", f"exceeds the job's {total} iterations: {done}")
        if done <= job.iterations_done:
            return []  # progress only moves forward; repeats are harmless
        job.iterations_done = done
        events = []
        bound = 0
        for k, iters in enumerate(job.stage_iterations):
            bound += iters
            if done >= bound and job.stages_finished <= k:
                job.stages_finished = k + 1
                events.append(Event("STAGE_FINISHED", job.cojob_id, job.job_id, k + 1))
                if k + 1 < len(job.stage_iterations):
                    events.append(Event("STAGE_STARTED", job.cojob_id, job.job_id, k + 2))
        self._save(job.key)
        return events

    def stage_finished(self, data: Any, caller: Caller = ROOT) -> list[Event]:
        m = v.mapping(data, "", ("cojob_id", "job_id", "stage"))
        job = self._job(m, caller)
        stage = v.integer(v.get(m, "stage", ""), "stage", minimum=1)
        if stage > len(job.stage_iterations):
            raise ConfigError("stage", f"job has {len(job.stage_iterations)} stages, got {stage}")
        if stage <= job.stages_finished:
            return []
        return self.progress(
            {
                "cojob_id": job.cojob_id,
                "job_id": job.job_id,
                "iterations_done": sum(job.stage_iterations[:stage]),
            },
            caller,
        )

    def job_finished(self, data: Any, caller: Caller = ROOT) -> list[Event]:
        """The job ended here; with ``pids``, only those participants did, and the job
        ends when the last participant it registered has."""
        m = v.mapping(data, "", ("cojob_id", "job_id", "pids"))
        job = self._job(m, caller)
        if job.finished:
            return []
        gone = {
            v.integer(x, f"pids[{i}]", minimum=1)
            for i, x in enumerate(v.sequence(m.get("pids", []), "pids"))
        }
        if gone and job.pids:
            job.pids = [p for p in job.pids if p[0] not in gone]
            if job.pids:
                self._save(job.key)
                return []
        return self._finish(job)

    def _finish(self, job: JobEntry) -> list[Event]:
        job.finished = True
        job.finished_at = time.time()
        self._save(job.key)
        return [Event("JOB_FINISHED", job.cojob_id, job.job_id, job.stages_finished)]

    def reap(self, exited: set[tuple[str, str]], now: float | None = None) -> list[Event]:
        """Finish the jobs in ``exited`` (all their processes are gone without a word)
        and forget finished jobs older than the grace period."""
        events = []
        for key in exited:
            job = self.jobs.get(key)
            if job is not None and not job.finished:
                events += self._finish(job)
        now = time.time() if now is None else now
        old = [
            k for k, j in self.jobs.items() if j.finished and now - j.finished_at > FINISHED_GRACE
        ]
        for k in old:
            del self.jobs[k]
        if old:
            self._save()
        return events

    def set_measured(self, key: tuple[str, str], per_host: dict[str, float]) -> None:
        job = self.jobs.get(key)
        if job is not None and job.measured != per_host:
            job.measured = dict(per_host)
            self._save(key)

    def apply_event(self, data: Any, caller: Caller = ROOT) -> list[Event]:
        """One JSON-lines event: ``{"event": "register" | "progress" | ..., ...}``."""
        m = v.mapping(data, "")
        kind = v.choice(
            v.get(m, "event", ""),
            "event",
            ("register", "progress", "stage_finished", "job_finished"),
        )
        body = {k: val for k, val in m.items() if k != "event"}
        return {
            "register": self.register,
            "progress": self.progress,
            "stage_finished": self.stage_finished,
            "job_finished": self.job_finished,
        }[kind](body, caller)

    # -- queries ---------------------------------------------------------------------
    def active_jobs(self) -> list[JobEntry]:
        return [j for j in self.jobs.values() if not j.finished]

    def local_flows(self, host: str) -> dict[str, Flow]:
        """Flows this host sends, of jobs not finished, by flow id."""
        out = {}
        for job in self.active_jobs():
            for f in job.flows:
                if f.src_host == host:
                    out[f.flow_id(job.cojob_id, job.job_id)] = f
        return out

    def finished_flows(self, host: str) -> set[str]:
        """Ids of flows this host sent for jobs that have finished."""
        return {
            f.flow_id(j.cojob_id, j.job_id)
            for j in self.jobs.values()
            if j.finished
            for f in j.flows
            if f.src_host == host
        }

    def finished_jobs(self) -> set[tuple[str, str]]:
        """Jobs that have finished (their host flows may still be in a plan)."""
        return {k for k, j in self.jobs.items() if j.finished}

    def _job(self, m: Any, caller: Caller = ROOT) -> JobEntry:
        key = (
            v.string(v.get(m, "cojob_id", ""), "cojob_id"),
            v.string(v.get(m, "job_id", ""), "job_id"),
        )
        if key not in self.jobs:
            raise ConfigError("job_id", f"job {key[0]}/{key[1]} is not registered")
        own.check_job(self.jobs[key], caller)
        return self.jobs[key]

    # -- persistence -----------------------------------------------------------------
    def _save(self, *changed: tuple[str, str]) -> None:
        """Write the state file. Each job's JSON is kept from the last write until the
        job changes: ``changed`` names the jobs changed since (every change here passes
        its job), so a write encodes only those (a job removed leaves the file)."""
        self.generation += 1
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        for key in changed:
            self._encoded.pop(key, None)
        old, self._encoded = self._encoded, {}
        for key, job in self.jobs.items():
            text = old.get(key)
            self._encoded[key] = json.dumps(_plain(job)) if text is None else text
        text = '{"version": 1, "jobs": [' + ", ".join(self._encoded.values()) + "]}"
        fd, tmp = tempfile.mkstemp(dir=self.state_file.parent, prefix=".state-")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.state_file)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _load(self) -> None:
        assert self.state_file is not None
        try:
            data = json.loads(self.state_file.read_text())
            for raw in data["jobs"]:
                raw["flows"] = [Flow(**f) for f in raw["flows"]]
                raw["pids"] = [tuple(p) for p in raw.get("pids", [])]
                job = JobEntry(**raw)
                self.jobs[job.key] = job
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(str(self.state_file), f"unreadable state file: {exc}") from None
