"""A job's registration: validation of what a participant sends, and the flows it stands for.

Shared by the agent (which accepts registrations) and the coordinator (which validates
what agents report). A flow with a port is matched in the kernel by destination address
and port; a *host flow* (no ports) stands for every connection of the job to a host,
found by the agent from the job's processes.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.common.flows import ARCHS, MAX_WEIGHT, flow_id


@dataclass(frozen=True)
class Flow:
    src_host: str
    dst_host: str
    dst_port: int  # 0 when the flow is classified by src_port (or is a host flow)
    src_port: int  # 0 with dst_port 0: every connection of the job to dst_host
    bytes_per_iteration: float

    @property
    def host_flow(self) -> bool:
        return not self.dst_port and not self.src_port

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
    weight: float = 1.0
    iterations_done: int = 0
    stages_finished: int = 0
    finished: bool = False
    pids: list[tuple[int, int]] = field(default_factory=list)  # (pid, start) participants
    finished_at: float = 0.0  # wall clock; the job leaves the registry FINISHED_GRACE later
    measured: dict[str, float] = field(default_factory=dict)  # bytes/iteration by host
    cgroup: str = ""  # its cgroup v2 path ("/a/b", from the cgroup2 root), if known by one
    own_cgroup: bool = False  # the agent made that cgroup for the job (and removes it)
    owner: int = 0  # uid that registered it: only it (or root) may change the job

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
            self.weight,
        )


def parse_registration(
    data: Any,
    known_hosts: set[str] | None = None,
    *,
    local_host: str | None = None,
    host_of: dict[str, str] | None = None,
) -> JobEntry:
    """Validate a registration. ``local_host`` is the default ``src_host``; ``host_of``
    (address -> host) lets a flow name its destination by a cluster address."""
    keys = (
        "cojob_id",
        "job_id",
        "arch",
        "stage_iterations",
        "model_bytes",
        "flows",
        "compute_time",
        "arrival",
        "pids",
        "weight",
        "cgroup",
        "own_cgroup",
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
    pids = [
        v.integer(x, f"pids[{i}]", minimum=1)
        for i, x in enumerate(v.sequence(m.get("pids", []), "pids"))
    ]
    flows = _parse_flows(m.get("flows", []), cojob, job, known_hosts, local_host, host_of)
    return JobEntry(
        cojob,
        job,
        arch,
        stages,
        model,
        flows,
        compute_time=v.number(m.get("compute_time", 0.0), "compute_time", minimum=0),
        arrival=v.number(m.get("arrival", 0.0), "arrival", minimum=0) or time.time(),
        weight=_weight(m.get("weight", 0.0)),
        pids=[(p, 0) for p in pids],
        cgroup=cgroup_path(m.get("cgroup", ""), "cgroup"),
        own_cgroup=v.boolean(m.get("own_cgroup", False), "own_cgroup"),
    )


CGROUP_PATH_MAX = 4095  # PATH_MAX less the terminating NUL
_CGROUP_NAME = re.compile(r"[A-Za-z0-9_.@:+=,-]+")


def cgroup_path(value: Any, path: str) -> str:
    """A cgroup v2 path as the kernel shows it in ``/proc/<pid>/cgroup`` ("/a/b", from
    the cgroup2 root), or "" for none. Components are names of letters, digits and
    ``_.@:+=,-`` (what systemd, Kubernetes and Slurm use; no ``..``, no quoting)."""
    if value in ("", None):
        return ""
    if not isinstance(value, str):
        raise ConfigError(path, f"expected a string, got {type(value).__name__}")
    if len(value.encode()) > CGROUP_PATH_MAX:
        raise ConfigError(path, f"longer than the kernel allows ({CGROUP_PATH_MAX} bytes)")
    if not value.startswith("/"):
        raise ConfigError(path, f"must start with '/' (from the cgroup2 root), got {value[:40]!r}")
    parts = value.strip("/").split("/")
    if value == "/" or not all(parts):
        raise ConfigError(path, f"needs a cgroup below the root, got {value[:40]!r}")
    for part in parts:
        if part in (".", "..") or not _CGROUP_NAME.fullmatch(part):
            raise ConfigError(path, f"bad component {part[:40]!r} (letters, digits, _.@:+=,-)")
    return "/" + "/".join(parts)


def _parse_flows(
    raw_flows: Any,
    cojob: str,
    job: str,
    known_hosts: set[str] | None,
    local_host: str | None,
    host_of: dict[str, str] | None,
) -> list[Flow]:
    """``flows``: each valid, no two with the same flow id."""
    flows = []
    seen: set[str] = set()
    for i, raw in enumerate(v.sequence(raw_flows, "flows")):
        f = _parse_flow(raw, f"flows[{i}]", known_hosts, local_host, host_of)
        fid = f.flow_id(cojob, job)
        if fid in seen:
            raise ConfigError(f"flows[{i}]", f"duplicate flow {fid}")
        seen.add(fid)
        flows.append(f)
    return flows


def _weight(value: Any) -> float:
    """0 (a message's default) means 1; otherwise in (0, MAX_WEIGHT]."""
    w = v.number(value, "weight", minimum=0) or 1.0
    if w > MAX_WEIGHT:
        raise ConfigError("weight", f"must be in (0, {MAX_WEIGHT:g}], got {w:g}")
    return w


def _parse_flow(
    data: Any,
    path: str,
    known_hosts: set[str] | None,
    local_host: str | None,
    host_of: dict[str, str] | None,
) -> Flow:
    keys = ("src_host", "dst_host", "dst_port", "src_port", "bytes_per_iteration")
    m = v.mapping(data, path, keys)
    hosts = []
    for key in ("src_host", "dst_host"):
        default = local_host if key == "src_host" and local_host else None
        raw = m.get(key) or default
        h = v.string(raw if raw is not None else v.get(m, key, path), f"{path}.{key}")
        h = (host_of or {}).get(h, h)  # a cluster address names its host
        if known_hosts is not None and h not in known_hosts:
            raise ConfigError(f"{path}.{key}", f"unknown host {h[:40]!r}")
        hosts.append(h)
    dport = v.integer(m.get("dst_port", 0), f"{path}.dst_port", minimum=0)
    sport = v.integer(m.get("src_port", 0), f"{path}.src_port", minimum=0)
    for key, port in (("dst_port", dport), ("src_port", sport)):
        if port > 65535:
            raise ConfigError(f"{path}.{key}", f"must be between 1 and 65535, got {port}")
    size = v.number(
        v.get(m, "bytes_per_iteration", path), f"{path}.bytes_per_iteration", positive=True
    )
    return Flow(hosts[0], hosts[1], dport, sport, size)


def reported_flows(job: JobEntry, destinations: set[str], host: str) -> list[Flow]:
    """The flows the agent reports for a job: declared port flows as they are, and one
    host flow per host the job sends to (declared, or seen as a connection).

    Bytes per iteration of a host flow: the measured figure once one exists (it is what
    the network really carries: frameworks bucket, compress and skip peers), else the
    declared one, else the declared model size spread evenly over the hosts the job has
    connections to (a rough prior that measurement replaces after a few iterations).
    A host with no figure at all is not reported: the job's traffic to it keeps the
    default band until something is known.
    """
    out = [f for f in job.flows if not f.host_flow]
    declared = {f.dst_host: f for f in job.flows if f.host_flow}
    hosts = sorted(set(declared) | destinations | set(job.measured))
    prior = job.model_bytes / max(1, len(destinations)) if job.model_bytes > 0 else 0.0
    for h in hosts:
        size = job.measured.get(h) or (declared[h].bytes_per_iteration if h in declared else 0)
        if not size and h in destinations:
            size = prior
        if size > 0:
            out.append(Flow(host, h, 0, 0, size))
    return out


def registration_dict(m: Any) -> dict[str, Any]:
    """A ``grouper.v1.JobRegistration`` message as the dict ``parse_registration`` reads
    (agents receive it from jobs, the coordinator in reports)."""
    return {
        "cojob_id": m.cojob_id,
        "job_id": m.job_id,
        "arch": m.arch,
        "stage_iterations": list(m.stage_iterations),
        "model_bytes": m.model_bytes,
        "flows": [
            {
                "src_host": f.src_host,
                "dst_host": f.dst_host,
                "dst_port": f.dst_port,
                "src_port": f.src_port,
                "bytes_per_iteration": f.bytes_per_iteration,
            }
            for f in m.flows
        ],
        "compute_time": m.compute_time,
        "arrival": m.arrival,
        "pids": list(m.pids),
        "weight": m.weight,
        "cgroup": m.cgroup,
        "own_cgroup": m.own_cgroup,
    }
