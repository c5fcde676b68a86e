"""Which tc class a band is: the contract between the qdisc and nftables' meta priority.

nftables sets ``skb->priority`` to ``4752:<minor>``. On a single-queue NIC the band
qdisc has handle ``4752:`` and reads that classid directly. On a multi-queue NIC the
root is our ``mq`` (``4752:``) and TX queue ``q`` has its own band qdisc with handle
``child_major(q):``; a small BPF classifier on it turns ``4752:<minor>`` into
``child_major(q):<minor>``, so the minor is the band everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from grouper.common.strict_priority import HTB_LEAF_BASE, leaf_minor

# Our qdisc handle major "GR" (0x4752): how the agent recognises what it installed.
HANDLE_MAJOR = 0x4752
HANDLE = HANDLE_MAJOR << 16
MAX_TX_QUEUES = 0x7FFF - HANDLE_MAJOR  # child majors stay below 0x8000 (a BPF s32 immediate)


def child_major(queue: int) -> int:
    """Handle major of the band qdisc on TX queue ``queue`` (0-based) under our mq root."""
    if not 0 <= queue < MAX_TX_QUEUES:
        raise ValueError(f"TX queue {queue} out of range")
    return HANDLE_MAJOR + 1 + queue


@dataclass(frozen=True)
class BandLayout:
    backend: str  # "prio" or "htb"
    bands: int

    def minor(self, band: int) -> int:
        if self.backend == "prio":
            return band + 1  # prio: skb->priority minor N selects band N-1
        return leaf_minor(band)  # htb: skb->priority is the leaf classid itself

    def classid(self, band: int, major: int = HANDLE_MAJOR) -> int:
        return (major << 16) | self.minor(band)

    def classid_text(self, band: int) -> str:
        return f"{HANDLE_MAJOR:x}:{self.minor(band):x}"

    def band_of_minor(self, minor: int) -> int | None:
        band = minor - 1 if self.backend == "prio" else minor - HTB_LEAF_BASE
        return band if 0 <= band < self.bands else None
