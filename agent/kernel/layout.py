"""Which tc class a band is: the contract between the qdisc and nftables' meta priority."""

from __future__ import annotations

from dataclasses import dataclass

# Our qdisc handle major "GR" (0x4752): how the agent recognises what it installed.
HANDLE_MAJOR = 0x4752
HANDLE = HANDLE_MAJOR << 16
HTB_PARENT_MINOR = 0x1
HTB_LEAF_BASE = 0x10


@dataclass(frozen=True)
class BandLayout:
    backend: str  # "prio" or "htb"
    bands: int

    def minor(self, band: int) -> int:
        if self.backend == "prio":
            return band + 1  # prio: skb->priority minor N selects band N-1
        return HTB_LEAF_BASE + band  # htb: skb->priority is the leaf classid itself

    def classid(self, band: int) -> int:
        return HANDLE | self.minor(band)

    def classid_text(self, band: int) -> str:
        return f"{HANDLE_MAJOR:x}:{self.minor(band):x}"

    def band_of_minor(self, minor: int) -> int | None:
        band = minor - 1 if self.backend == "prio" else minor - HTB_LEAF_BASE
        return band if 0 <= band < self.bands else None
