"""Garbage-collector policy for the coordinator process.

At a thousand agents the coordinator holds hundreds of thousands of long-lived objects
(validated registrations, flow tables) and allocates as many per cycle. With CPython's
default thresholds, full collections then walk the whole heap several times per cycle
and took 0.3-0.9 s of a 1.5 s cycle (measured with ``gc.callbacks`` in
``grouper bench coordinator``). So, after every cycle, what survived is moved to the
permanent generation (``gc.freeze``) and young collections run every 100,000
allocations instead of 700 (0.74-0.85 s instead of 0.88-0.92 s per cycle); a full
collection every ``full_every`` seconds reclaims any reference cycles frozen meanwhile.
"""

from __future__ import annotations

import gc
import time

YOUNG_THRESHOLD = (100_000, 20, 20)  # young collections every 100k allocations, not 700


class HeapKeeper:
    def __init__(self, full_every: float = 600.0) -> None:
        self.full_every = full_every
        self.last_full = time.monotonic()
        self.saved = gc.get_threshold()
        gc.set_threshold(*YOUNG_THRESHOLD)

    def after_cycle(self) -> None:
        if time.monotonic() - self.last_full > self.full_every:
            gc.unfreeze()
            gc.collect()
            self.last_full = time.monotonic()
        gc.freeze()

    def close(self) -> None:
        """Give the heap back to the default policy (tests run many coordinators)."""
        gc.unfreeze()
        gc.set_threshold(*self.saved)
