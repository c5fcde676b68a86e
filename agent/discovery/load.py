"""Bytes per iteration of a job toward each host, measured when nobody declared them.

Between two readings the tracker reports the bytes a job's connections to host H had
acked; the registry reports how many iterations the job did. A reading with progress
turns the bytes accumulated since the last such reading into one sample of bytes per
iteration; readings without progress carry their bytes over. Samples are smoothed with
an exponential moving average, and reported rounded to two significant digits so small
wobbles do not change the job's registration (and the coordinator's caches) every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

ALPHA = 0.5  # weight of the newest sample


def round2(x: float) -> float:
    """``x`` to two significant digits."""
    if x <= 0 or not math.isfinite(x):
        return 0.0
    return round(x, 1 - int(math.floor(math.log10(x))))


@dataclass
class LoadEstimate:
    iterations: int = 0  # iterations done at the last sample
    pending: dict[str, int] = field(default_factory=dict)  # bytes since the last sample
    per_iteration: dict[str, float] = field(default_factory=dict)  # smoothed, by host

    def add(self, dst: str, nbytes: int) -> None:
        self.pending[dst] = self.pending.get(dst, 0) + nbytes

    def update(self, iterations_done: int) -> bool:
        """Close a sample if the job progressed; True when an estimate changed."""
        done = iterations_done - self.iterations
        if done <= 0:
            return False
        if not self.pending and not self.per_iteration:  # nothing measured yet
            self.iterations = iterations_done
            return False
        changed = False
        for dst in self.pending.keys() | self.per_iteration.keys():
            sample = self.pending.get(dst, 0) / done  # a host no longer sent to decays
            old = self.per_iteration.get(dst)
            new = sample if old is None else ALPHA * sample + (1 - ALPHA) * old
            if round2(new) != round2(old or 0.0):
                changed = True
            self.per_iteration[dst] = new
        self.pending = {}
        self.iterations = iterations_done
        return changed

    def reported(self) -> dict[str, float]:
        """Estimates as reported to the coordinator (hosts with at least one byte)."""
        out = {}
        for dst, x in self.per_iteration.items():
            r = round2(x)
            if r >= 1:
                out[dst] = r
        return out
