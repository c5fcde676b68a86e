"""What agents report and what the scheduler sees of it (pure): validated
registrations (:class:`ReportedJob`), progress beside them (:class:`JobReport`), and
the :class:`Model` that ``coordinator.merge`` makes of all hosts' reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from grouper.pda.model import Cojob


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
    weight: float = 1.0

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
    # per flow row, for port-matched flows: the receiving host's index and its inbound
    # key (the receiver's ACKs and handshakes on it are ours); -1 and "" for host flows
    flow_inbound_dst: list[int] = field(default_factory=list)
    flow_inbound_key: list[str] = field(default_factory=list)
    # iterations done of every job, cojob by cojob in ``cojobs`` order: the merger keeps
    # progress here, not in the jobs (they carry 0), so that progress rebuilds no object;
    # None: the jobs' own ``done``
    job_done: np.ndarray | None = None
