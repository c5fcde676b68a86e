"""How much of the machine's CPU the hypervisor took while an emulated run ran.

On a virtual machine, "steal" is time a virtual CPU was ready to run but the host ran
something else. Emulated links are shaped in software and the traffic generator is one
Python process, so steal slows an emulated run where nothing in the workload changed:
bursts of 36-58% stolen made single fair-sharing runs 1.4-3x slower than any other
(docs/explanation/emulation.md). ``grouper emulate`` samples ``/proc/stat`` once a second during
each policy's run and reports the mean and the worst second beside the times.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# /proc/stat's "cpu" line: user nice system idle iowait irq softirq steal guest guest_nice;
# guest time is already counted in user and nice, so it is left out of the total
STEAL_FIELD = 7
COUNTED_FIELDS = 8
# a run whose mean steal is above this is flagged as not to be trusted
STEAL_WARNING = 0.20


def read_cpu(stat: Path = Path("/proc/stat")) -> tuple[int, int]:
    """(stolen, total) jiffies over all CPUs since boot."""
    for line in stat.read_text().splitlines():
        parts = line.split()
        if parts and parts[0] == "cpu":
            values = [int(v) for v in parts[1 : 1 + COUNTED_FIELDS]]
            values += [0] * (COUNTED_FIELDS - len(values))  # old kernels: no steal field
            return values[STEAL_FIELD], sum(values)
    raise ValueError(f"{stat}: no aggregate cpu line")


def stolen_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """The share of CPU time stolen between two :func:`read_cpu` samples."""
    stolen, total = after[0] - before[0], after[1] - before[1]
    return stolen / total if total > 0 else 0.0


@dataclass
class StealMonitor:
    """Samples steal every ``interval`` seconds in a thread, between ``start`` and
    ``stop``; :meth:`summary` gives the mean over the whole span and the worst sample."""

    interval: float = 1.0
    read: Callable[[], tuple[int, int]] = read_cpu
    samples: list[float] = field(default_factory=list)

    def start(self) -> None:
        self._stop = threading.Event()
        self._first = self._last = self.read()
        self._thread = threading.Thread(target=self._loop, name="steal", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            now = self.read()
            self.samples.append(stolen_share(self._last, now))
            self._last = now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._end = self.read()

    def summary(self) -> dict[str, float]:
        mean = stolen_share(self._first, self._end)
        return {"mean": mean, "max": max(self.samples, default=mean)}
