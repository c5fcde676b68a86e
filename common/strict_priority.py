"""Strict priority emulated with HTB, as data: the one class tree the agent's ``htb``
backend (agent/kernel/bands.py, through pyroute2) and the emulated switch ports
(topologies/leafspine.py, through ``tc``) both build.

One parent class at the link rate; under it one leaf per band with a tiny guaranteed
rate (``min_share`` of the link, at least 1 kB/s), ``ceil`` at the link rate and HTB
``prio`` = band, so a lower band borrows first and a higher one gets only what is
left. HTB has eight priorities: bands past 7 share prio 7.
"""

from __future__ import annotations

from dataclasses import dataclass

HTB_PARENT_MINOR = 0x1
HTB_LEAF_BASE = 0x10  # band b is the leaf class with minor 0x10 + b
HTB_PRIOS = 8
MIN_LEAF_RATE = 1000  # bytes per second


@dataclass(frozen=True)
class HtbClass:
    minor: int
    parent_minor: int  # 0: directly under the qdisc
    rate: int  # guaranteed, bytes per second
    ceil: int  # bytes per second
    prio: int


def leaf_minor(band: int) -> int:
    return HTB_LEAF_BASE + band


def leaf_rate(rate_bps: int, min_share: float) -> int:
    """A band's guaranteed rate: ``min_share`` of the link, at least 1 kB/s."""
    return max(int(rate_bps * min_share), MIN_LEAF_RATE)


def strict_priority_classes(bands: int, rate_bps: int, min_share: float) -> list[HtbClass]:
    """The parent class, then one leaf per band, for a link of ``rate_bps`` bytes/s."""
    tiny = leaf_rate(rate_bps, min_share)
    parent = HtbClass(HTB_PARENT_MINOR, 0, rate_bps, rate_bps, 0)
    leaves = [
        HtbClass(leaf_minor(b), HTB_PARENT_MINOR, tiny, rate_bps, min(b, HTB_PRIOS - 1))
        for b in range(bands)
    ]
    return [parent, *leaves]
