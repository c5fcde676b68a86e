"""Cojobs, jobs and the traffic one training iteration generates.

A *cojob* is a group of jobs of one model run in stages (iterations per stage). A job
is either parameter-server (``ps``), ring all-reduce (``ring``) or an explicit list of
per-iteration flows (``flows``, used for textbook examples and for jobs that report
their own flows). Hosts are names; the snapshot maps them to ports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from grouper.common.errors import ConfigError
from grouper.common.flows import MAX_WEIGHT

if TYPE_CHECKING:
    from grouper.pda.flow_table import FlowTable


@dataclass(frozen=True)
class FlowSpec:
    """Bytes one iteration moves from host ``src`` to host ``dst``."""

    src: str
    dst: str
    bytes: float


def ps_flows(
    workers: tuple[str, ...], servers: tuple[str, ...], model_bytes: float
) -> list[FlowSpec]:
    """Every worker pushes model/#servers bytes to every server, which sends as much back.

    Pushes are at even positions and the matching pulls right after them (odd): the
    simulator runs an iteration's pushes first and its pulls second.
    """
    shard = model_bytes / len(servers)
    flows = []
    for w in workers:
        for s in servers:
            flows.append(FlowSpec(w, s, shard))
            flows.append(FlowSpec(s, w, shard))
    return flows


def ring_flows(workers: tuple[str, ...], model_bytes: float) -> list[FlowSpec]:
    """Every worker sends 2(W-1)/W x model bytes to its ring successor per iteration."""
    n = len(workers)
    per_worker = 2.0 * (n - 1) / n * model_bytes
    return [FlowSpec(workers[i], workers[(i + 1) % n], per_worker) for i in range(n)]


@dataclass(frozen=True)
class Job:
    """One training job.

    ``stages`` is how many stages the job runs when known (it is killed after that
    many); ``None`` means unknown, so online schedulers assume it runs all of them.
    ``done`` counts iterations completed so far, across stages.
    """

    job_id: str
    arch: str
    flows: tuple[FlowSpec, ...] | FlowTable  # a FlowTable: a trace's flows as arrays
    model_bytes: float = 0.0
    workers: tuple[str, ...] = ()
    servers: tuple[str, ...] = ()
    compute_time: float = 0.0
    stages: int | None = None
    done: int = 0
    weight: float = 1.0  # importance: a stage weighs as its heaviest job (PDA, Sincronia)

    @staticmethod
    def ps(
        job_id: str,
        model_bytes: float,
        workers: list[str] | tuple[str, ...],
        servers: list[str] | tuple[str, ...],
        **kw: object,
    ) -> Job:
        w, s = tuple(workers), tuple(servers)
        _check_hosts_list(w, "workers", 1)
        _check_hosts_list(s, "servers", 1)
        _check_bytes(model_bytes, "model_bytes")
        return Job(job_id, "ps", tuple(ps_flows(w, s, model_bytes)), model_bytes, w, s, **kw)

    @staticmethod
    def ring(
        job_id: str, model_bytes: float, workers: list[str] | tuple[str, ...], **kw: object
    ) -> Job:
        w = tuple(workers)
        _check_hosts_list(w, "workers", 2)
        _check_bytes(model_bytes, "model_bytes")
        return Job(job_id, "ring", tuple(ring_flows(w, model_bytes)), model_bytes, w, (), **kw)

    @staticmethod
    def explicit(job_id: str, flows: list[FlowSpec], **kw: object) -> Job:
        if not flows:
            raise ConfigError("flows", "needs at least 1 item(s), got 0")
        for i, f in enumerate(flows):
            _check_bytes(f.bytes, f"flows[{i}].bytes")
        return Job(job_id, "flows", tuple(flows), **kw)

    def hosts(self) -> set[str]:
        return {f.src for f in self.flows} | {f.dst for f in self.flows}


@dataclass(frozen=True)
class Cojob:
    """A group of jobs that advance through stages together (successive halving)."""

    cojob_id: str
    stage_iterations: tuple[int, ...]
    jobs: tuple[Job, ...]
    arrival: float = 0.0
    stage_started: tuple[float, ...] = field(default=())
    # jobs wait for each other at the end of every stage (successive halving); False:
    # every job moves on to its next stage by itself
    barrier: bool = True

    def __post_init__(self) -> None:
        if not self.stage_iterations:
            raise ConfigError("stages", "a cojob needs at least one stage")
        for k, it in enumerate(self.stage_iterations):
            if it <= 0:
                raise ConfigError(f"stages[{k}]", f"iterations must be positive, got {it}")
        if not self.jobs:
            raise ConfigError("jobs", "a cojob needs at least one job")
        seen: set[str] = set()
        for i, job in enumerate(self.jobs):
            if job.job_id in seen:
                raise ConfigError(f"jobs[{i}].id", f"duplicate job id {job.job_id!r}")
            seen.add(job.job_id)
            if not (0 < job.weight <= MAX_WEIGHT and math.isfinite(job.weight)):
                raise ConfigError(
                    f"jobs[{i}].weight", f"must be in (0, {MAX_WEIGHT:g}], got {job.weight!r}"
                )
            if job.stages is not None and not 1 <= job.stages <= len(self.stage_iterations):
                raise ConfigError(
                    f"jobs[{i}].stages",
                    f"must be between 1 and {len(self.stage_iterations)}, got {job.stages}",
                )

    @property
    def num_stages(self) -> int:
        return len(self.stage_iterations)

    def stage_id(self, k: int) -> str:
        """Stage ids are ``<cojob>/<stage number from 1>``."""
        return f"{self.cojob_id}/{k + 1}"


def _check_hosts_list(hosts: tuple[str, ...], name: str, minimum: int) -> None:
    if len(hosts) < minimum:
        what = "a ring needs" if name == "workers" and minimum == 2 else "needs"
        raise ConfigError(name, f"{what} at least {minimum} host(s), got {len(hosts)}")


def _check_bytes(value: float, name: str) -> None:
    if not value > 0:
        raise ConfigError(name, f"must be positive, got {value!r}")
