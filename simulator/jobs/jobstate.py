"""A job's state in :mod:`simulator.jobs.engine` (Wang et al. 2020's simulation)."""

from __future__ import annotations

from grouper.simulator.jobs.rules import AUTHORS_LWF_COMM_S_PER_BYTE, Rules
from grouper.workloads.jobmix import GpuJob

QUEUED, COMPUTE, COMM_READY, COMM, LATENCY, DONE = range(6)


class Job:
    """A job's state while it runs (everything in units of one simulated iteration)."""

    __slots__ = (
        "spec", "id", "n", "left", "compute", "bytes", "latency", "memory", "gpus",
        "servers", "multi", "waiting", "running", "phase", "comm_left", "rate", "stamp",
        "version", "placed", "end", "per_iteration", "_b", "t_f", "t_b", "fw_done",
        "cumul_left", "code_key", "lwf_comm", "server_order", "comm_start",
    )  # fmt: skip

    def __init__(
        self, spec: GpuJob, batch: int, model_a: float, model_b: float, rules: Rules | None = None
    ) -> None:
        self.spec, self.id, self.n = spec, spec.id, spec.gpus
        self.left = -(-spec.iterations // batch)  # simulated iterations, ceil
        self.compute = spec.model.compute * batch
        self.bytes = spec.model.bytes * batch
        self.latency = model_a * batch
        self.memory = spec.model.memory_mb
        self.gpus: list[int] = []
        self.servers: list[int] = []
        self.multi = False
        self.waiting: set[int] = set()
        self.running = 0
        self.phase = QUEUED
        self.comm_left = self.rate = self.stamp = 0.0
        self.version = 0
        self.placed = self.end = float("nan")
        # SRSF service of one iteration over all GPUs: (C + E) x |G| (Algorithm 3,
        # line 1); E is 0 until placement says whether the job communicates
        self.per_iteration = self.compute * self.n
        self._b = model_b
        self.t_f, self.t_b = spec.model.t_f * batch, spec.model.t_b * batch
        self.fw_done: set[int] = set()  # GPUs whose forward pass is done (two tasks)
        # the authors' SRSF key: compute left over all GPUs, lowered as each pass ends
        self.cumul_left = self.left * self.compute * self.n
        self.code_key = rules is not None and rules.srsf_key == "code"
        self.lwf_comm = 0.0  # the authors' LWF: estimated all-reduce per iteration
        self.server_order: list[int] = []  # servers in the order placement chose them
        self.comm_start = 0.0

    def place(self, gpus: list[int], per_server: int) -> None:
        self.gpus = gpus
        self.server_order = list(dict.fromkeys(g // per_server for g in gpus))
        self.servers = sorted(self.server_order)
        self.multi = len(self.servers) > 1
        if self.multi:
            self.per_iteration = (self.compute + self.latency + self.bytes * self._b) * self.n
            self.lwf_comm = self.bytes * AUTHORS_LWF_COMM_S_PER_BYTE

    @property
    def remaining(self) -> float:
        return self.cumul_left if self.code_key else self.left * self.per_iteration

    def lwf_load(self, gpu: int, busy: Job | None) -> float:
        """The authors' LWF load of this job on ``gpu``: its remaining passes there and,
        on several servers, their estimate of its remaining all-reduces."""
        done = 0.0
        if gpu in self.fw_done:
            done = self.t_f
        elif gpu not in self.waiting and busy is not self and self.phase != QUEUED:
            done = self.compute  # this iteration's passes are done on this GPU
        return self.left * (self.compute + self.lwf_comm) - done
