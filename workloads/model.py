"""The workload as every layer sees it (parsed from YAML, generated, or read from a
trace): below both the schema and the generators, which build it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grouper.common.queues import QueueConfig
from grouper.pda.model import Cojob


@dataclass(frozen=True)
class Workload:
    name: str
    hosts: tuple[str, ...]
    cojobs: tuple[Cojob, ...]
    capacity: float  # bytes per time unit of every host port
    time_unit: str  # "s" or a name such as "unit" for textbook examples
    topology: str | None = None  # bigswitch:P or leafspine:...; None = big switch
    # cojob id -> (cojob id, stage): arrives when that stage of that cojob completes
    release_after: dict[str, tuple[str, int]] = field(default_factory=dict)
    period: float = 0.0  # default scheduling period for experiments (0 = every event)
    meta: dict = field(default_factory=dict)  # generator parameters (scale factors, seed)
    queues: QueueConfig | None = None  # scheduling.queues/admission; None: the defaults
    # PS iterations: push then pull ("sequential") or both at once ("overlap")
    ps_mode: str = "sequential"
    # ring all-reduce iterations: every hop's bytes as one flow ("fluid"), or 2(W-1)
    # steps of a chunk per hop with a barrier after each ("steps", as the replay runs)
    ring_mode: str = "fluid"
    # link sharing between jobs: Wang et al.'s Eq. 5 ("wang") or ideal fluid ("none");
    # unset in a file: "wang" for workloads in seconds, "none" for textbook time units
    contention: str = "wang"
    # traffic between a host and itself: not on the network ("drop"), or through the
    # host's own uplink and downlink ("ports", e.g. containers in separate namespaces)
    local_traffic: str = "drop"
    # share of every link's rate that payload moves at (headers, TCP's losses): 1 is the
    # nominal rate; `grouper calibrate` measures it as 1 / (b x host link rate)
    goodput: float = 1.0
