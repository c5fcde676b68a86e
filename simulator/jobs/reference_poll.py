"""The authors' poll artefact, as their code has it (``--reference-poll``).

In their simulator (github.com/HKBU-HPML/dl-scheduling, ``online/job.py``) AdaDUAL's
check ``is_all_nodes_free`` (line 144) reads a running all-reduce's remaining size with
``get_rest_size()`` (lines 52-54)::

    self.transferred_size += (time - self.last_change_time) * self.speed
    return self.model_size - self.transferred_size

It adds the bytes moved since the task's last rate update but leaves
``last_change_time``. Their loop steps in 1 ms slots, updates every running all-reduce
once a slot (``update_comm_time``, which adds the same bytes again and moves the stamp)
and checks every waiting all-reduce every slot, in SRSF order. So each check moves the
all-reduce it reads one slot's bytes further: an artefact, not part of AdaDUAL; it is
here to reproduce their numbers, not as a rule.

:class:`PolledSimulation` does the same in the event engine: every check of a running
all-reduce (at the engine's admission decisions, and at every slot boundary for each
waiting job whose busiest server carries exactly one, the only case in which their check
reads sizes) takes ``rate x min(slot, time since it started)`` bytes off it, and a job
is checked at most once a slot. Only Ada-SRSF checks sizes; SRSF(n) counts tasks.
"""

from __future__ import annotations

import math

from grouper.simulator.jobs.engine import BYTES_DONE, JobsResult, Simulation
from grouper.simulator.jobs.jobstate import COMM, Job

TICK = 5  # an event kind after the engine's five


class PolledSimulation(Simulation):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.slot = self.rules.slot
        self.tick_at = -1.0
        self.last_check: dict[int, int] = {}  # job id -> slot of its last check
        self.polls = 0

    def slot_of(self, t: float) -> int:
        return math.ceil(t / self.slot - 1e-6)

    def remaining_bytes(self, job: Job) -> list[float]:
        """The check: each running all-reduce it reads moves one slot further."""
        self.last_check[job.id] = self.slot_of(self.now)
        out = []
        for task in self.checked(job):
            if task.phase != COMM:
                continue
            extra = task.rate * min(self.slot, self.now - task.comm_start)
            left = task.comm_left - (self.now - task.stamp) * task.rate - extra
            task.comm_left, task.stamp = max(left, 0.0), self.now
            task.version += 1
            self.push(self.now + task.comm_left / task.rate, BYTES_DONE, task, task.version)
            self.polls += extra > 0
            # overdrawn (their size below 0) it still counts as running: their ratio
            # test refuses next to it until it ends
            out.append(max(left, 1e-9))
        return out

    def pollers(self) -> list[Job]:
        if self.scheduler.kind != "ada-srsf":
            return []
        return [j for j in self.comm_ready if max(len(self.server_comm[s]) for s in j.servers) == 1]

    def dispatch(self) -> None:
        super().dispatch()
        if self.tick_at <= self.now and self.pollers():
            self.tick_at = (self.slot_of(self.now) + 1) * self.slot
            self.push(self.tick_at, TICK, self.jobs[0])

    def handle(self, kind: int, job: Job, extra: object) -> None:
        if kind != TICK:
            super().handle(kind, job, extra)
            return
        now = self.slot_of(self.now)
        for j in sorted(self.pollers(), key=lambda x: (x.remaining, x.id)):
            if self.last_check.get(j.id) == now or j not in self.comm_ready:
                continue
            loads = [len(self.server_comm[s]) for s in j.servers]
            if self.scheduler.admit(
                j.bytes, loads, lambda j=j: self.remaining_bytes(j), self.model
            ):
                self.start_comm(j)  # never, in our reading: checks only shrink the sizes
                self.comm_ready.remove(j)

    def result(self, seconds: float) -> JobsResult:
        out = super().result(seconds)
        out.summary["reference_polls"] = self.polls
        return out
