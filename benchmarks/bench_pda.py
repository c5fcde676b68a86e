"""PDA's order, as ``grouper bench pda`` times it: ``pda_order`` on the snapshot of a
random instance (``random_cojobs``, seed 1), at 1,000 hosts x 10,000 stages and at
10,000 x 100,000. The instances are built once per commit and round (``setup_cache``);
each sample is one ``pda_order`` call."""

from __future__ import annotations

from benchmarks._common import module

SIZES = ("1000x10000", "10000x100000")


class PDAOrder:
    params = [list(SIZES)]
    param_names = ["hosts x stages"]
    number = 1
    repeat = (4, 6, 20.0)  # samples per round: at least 4, at most 6, ~20 s
    rounds = 2
    timeout = 300

    def setup_cache(self) -> dict:
        build_snapshot = module("grouper.pda.snapshot").build_snapshot
        random_cojobs = module("grouper.workloads.random_instance").random_cojobs
        out = {}
        for size in SIZES:
            hosts, stages = map(int, size.split("x"))
            names, cojobs = random_cojobs(hosts, stages, 1)
            out[size] = build_snapshot(cojobs, names)
        return out

    def time_order(self, snapshots: dict, size: str) -> None:
        module("grouper.pda.order").pda_order(snapshots[size])
