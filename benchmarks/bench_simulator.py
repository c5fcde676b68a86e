"""The simulator on FB2010's first sixteenth (``grouper bench simulator --trace
FB2010-1Hr-150-0.txt --fractions 0.0625``), per policy: each sample is one run as the
command makes it, a fresh interpreter that loads the trace prefix and simulates it, its
whole life timed (start-up, imports and loading count)."""

from __future__ import annotations

import math

from benchmarks._common import TRACE, module, need_trace

POLICIES = ("fs", "baraat", "sincronia", "sptf", "grouper")
FRACTION, LINK_GBPS = 0.0625, 1.0


class SimulatorFB2010Sixteenth:
    params = [list(POLICIES)]
    param_names = ["policy"]
    number = 1
    repeat = (3, 4, 30.0)
    rounds = 2
    warmup_time = 0.0  # each run is a fresh process: nothing to warm in this one
    timeout = 300

    def setup(self, policy: str) -> None:
        need_trace()
        module("grouper.simulator.bench")  # a commit without `grouper bench simulator`: skipped

    def time_run(self, policy: str) -> None:
        in_child = module("grouper.simulator.bench")._in_child
        run = in_child((TRACE, policy, FRACTION, LINK_GBPS, False, math.inf, False))
        if "stopped_at" in run:
            raise RuntimeError(f"{policy} stopped at t={run['stopped_at']}")
