"""Jobs running on this host, as their participants report them.

Input arrives as plain mappings (from gRPC messages or JSON-lines events) and is
validated here, with errors naming the field. The registry is persisted with atomic
writes (temp file + rename) so an agent restart loses nothing.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from grouper import validate as v
from grouper.errors import ConfigError
from grouper.flows import flow_id
from pda.model import ARCHS

EVENT_KINDS = ("REGISTERED", "STAGE_STARTED", "STAGE_FINISHED", "JOB_FINISHED")


@dataclass(frozen=True)
class Flow:
    src_host: str
    dst_host: str
    dst_port: int  # 0 when the flow is classified by src_port
    src_port: int
    bytes_per_iteration: float

    def flow_id(self, cojob: str, job: str) -> str:
        return flow_id(cojob, job, self.dst_host, self.dst_port, self.src_port)


@dataclass
class JobEntry:
    cojob_id: str
    job_id: str
    arch: str
    stage_iterations: list[int]
    model_bytes: float
    flows: list[Flow]
    compute_time: float = 0.0
    arrival: float = 0.0
    iterations_done: int = 0
    stages_finished: int = 0
    finished: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.cojob_id, self.job_id)

    def spec(self) -> tuple:
        return (
            self.arch,
            tuple(self.stage_iterations),
            self.model_bytes,
            tuple(self.flows),
            self.compute_time,
        )


@dataclass(frozen=True)
class Event:
    kind: str
    cojob_id: str
    job_id: str
    stage: int
    time: float = field(default_factory=time.time)


def parse_registration(data: Any, known_hosts: set[str] | None = None) -> JobEntry:
    keys = (
        "cojob_id",
        "job_id",
        "arch",
        "stage_iterations",
        "model_bytes",
        "flows",
        "compute_time",
        "arrival",
    )
    m = v.mapping(data, "", keys)
    cojob = v.string(v.get(m, "cojob_id", ""), "cojob_id")
    job = v.string(v.get(m, "job_id", ""), "job_id")
    for name, val in (("cojob_id", cojob), ("job_id", job)):
        if "/" in val or ":" in val:
            raise ConfigError(name, f"must not contain '/' or ':', got {val!r}")
    arch = v.choice(v.get(m, "arch", ""), "arch", ARCHS)
    stages = [
        v.integer(x, f"stage_iterations[{i}]", minimum=1)
        for i, x in enumerate(
            v.sequence(v.get(m, "stage_iterations", ""), "stage_iterations", min_len=1)
        )
    ]
    model = v.number(m.get("model_bytes", 0.0), "model_bytes", minimum=0)
    if arch != "flows" and model <= 0:
        raise ConfigError("model_bytes", f"must be positive for arch {arch!r}, got {model:g}")
    flows = []
    seen: set[str] = set()
    for i, raw in enumerate(v.sequence(v.get(m, "flows", ""), "flows", min_len=1)):
        f = _parse_flow(raw, f"flows[{i}]", known_hosts)
        fid = f.flow_id(cojob, job)
        if fid in seen:
            raise ConfigError(f"flows[{i}]", f"duplicate flow {fid}")
        seen.add(fid)
        flows.append(f)
    return JobEntry(
        cojob,
        job,
        arch,
        stages,
        model,
        flows,
        compute_time=v.number(m.get("compute_time", 0.0), "compute_time", minimum=0),
        arrival=v.number(m.get("arrival", 0.0), "arrival", minimum=0) or time.time(),
    )


def _parse_flow(data: Any, path: str, known_hosts: set[str] | None) -> Flow:
    keys = ("src_host", "dst_host", "dst_port", "src_port", "bytes_per_iteration")
    m = v.mapping(data, path, keys)
    hosts = []
    for key in ("src_host", "dst_host"):
        h = v.string(v.get(m, key, path), f"{path}.{key}")
        if known_hosts is not None and h not in known_hosts:
            raise ConfigError(f"{path}.{key}", f"unknown host {h!r}")
        hosts.append(h)
    dport = v.integer(m.get("dst_port", 0), f"{path}.dst_port", minimum=0)
    sport = v.integer(m.get("src_port", 0), f"{path}.src_port", minimum=0)
    for key, port in (("dst_port", dport), ("src_port", sport)):
        if port > 65535:
            raise ConfigError(f"{path}.{key}", f"must be between 1 and 65535, got {port}")
    if not dport and not sport:
        raise ConfigError(f"{path}.dst_port", "required (or give src_port)")
    size = v.number(
        v.get(m, "bytes_per_iteration", path), f"{path}.bytes_per_iteration", positive=True
    )
    return Flow(hosts[0], hosts[1], dport, sport, size)


class Registry:
    """Local jobs keyed by (cojob, job). Every change returns the events it causes."""

    def __init__(
        self, state_file: str | Path | None = None, known_hosts: set[str] | None = None
    ) -> None:
        self.jobs: dict[tuple[str, str], JobEntry] = {}
        self.known_hosts = known_hosts
        self.state_file = Path(state_file) if state_file else None
        if self.state_file and self.state_file.exists():
            self._load()

    # -- changes ---------------------------------------------------------------------
    def register(self, data: Any) -> list[Event]:
        entry = parse_registration(data, self.known_hosts)
        old = self.jobs.get(entry.key)
        if old is not None:
            if old.spec() != entry.spec():
                raise ConfigError(
                    "job_id",
                    f"job {entry.cojob_id}/{entry.job_id} is already "
                    "registered with a different spec",
                )
            return []  # idempotent re-registration (e.g. a JSON-lines file read again)
        self.jobs[entry.key] = entry
        self._save()
        return [
            Event("REGISTERED", entry.cojob_id, entry.job_id, 0),
            Event("STAGE_STARTED", entry.cojob_id, entry.job_id, 1),
        ]

    def progress(self, data: Any) -> list[Event]:
        m = v.mapping(data, "", ("cojob_id", "job_id", "iterations_done"))
        job = self._job(m)
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
        self._save()
        return events

    def stage_finished(self, data: Any) -> list[Event]:
        m = v.mapping(data, "", ("cojob_id", "job_id", "stage"))
        job = self._job(m)
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
            }
        )

    def job_finished(self, data: Any) -> list[Event]:
        m = v.mapping(data, "", ("cojob_id", "job_id"))
        job = self._job(m)
        if job.finished:
            return []
        job.finished = True
        self._save()
        return [Event("JOB_FINISHED", job.cojob_id, job.job_id, job.stages_finished)]

    def apply_event(self, data: Any) -> list[Event]:
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
        }[kind](body)

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

    def _job(self, m: Any) -> JobEntry:
        key = (
            v.string(v.get(m, "cojob_id", ""), "cojob_id"),
            v.string(v.get(m, "job_id", ""), "job_id"),
        )
        if key not in self.jobs:
            raise ConfigError("job_id", f"job {key[0]}/{key[1]} is not registered")
        return self.jobs[key]

    # -- persistence -----------------------------------------------------------------
    def _save(self) -> None:
        if self.state_file is None:
            return
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        data = {"version": 1, "jobs": [asdict(j) for j in self.jobs.values()]}
        fd, tmp = tempfile.mkstemp(dir=self.state_file.parent, prefix=".state-")
        try:
            with os.fdopen(fd, "w") as fh:
                json.dump(data, fh)
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
                job = JobEntry(**raw)
                self.jobs[job.key] = job
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(str(self.state_file), f"unreadable state file: {exc}") from None
