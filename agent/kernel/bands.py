"""One strict-priority qdisc with a band per queue: the only builder of our bands.

Two backends:

* ``prio``: ``tc prio`` with one band per queue (real hosts have it);
* ``htb``: strict priority emulated with HTB: the class tree of
  :mod:`grouper.common.strict_priority` (the emulated switches build the same one).

The same builder makes the single root of a single-queue NIC and the per-queue children
under the ``mq`` root of a multi-queue NIC; only ``major`` and ``parent`` differ.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyroute2 import IPRoute

from grouper.agent.kernel.layout import BandLayout
from grouper.common.strict_priority import HTB_PRIOS, strict_priority_classes

HTB_MAX_BANDS = HTB_PRIOS  # a band per HTB class prio (0..7)


@dataclass(frozen=True)
class QdiscSpec:
    backend: str
    bands: int
    default_band: int
    rate_bps: int  # link rate, bytes per second (HTB only)
    min_share: float = 0.001  # of the link, guaranteed to every band (HTB only)
    multiqueue: bool = True  # a band qdisc per TX queue where the NIC has several

    @property
    def layout(self) -> BandLayout:
        return BandLayout(self.backend, self.bands)


def read_classes(ipr: IPRoute, index: int, majors: set[int]) -> dict[int, dict]:
    """Our classes (handle -> parameters and counters) in the qdiscs with ``majors``."""
    out = {}
    for c in ipr.get_classes(index=index):
        if c["handle"] >> 16 not in majors:
            continue
        opts = c.get_attr("TCA_OPTIONS")
        parms = opts.get_attr("TCA_HTB_PARMS") if opts is not None else None
        stats = c.get_attr("TCA_STATS2")
        basic = stats.get_attr("TCA_STATS_BASIC") if stats is not None else None
        queue = stats.get_attr("TCA_STATS_QUEUE") if stats is not None else None
        out[c["handle"]] = {
            "parent": c["parent"],
            "rate": parms["rate"] if parms else None,
            "ceil": parms["ceil"] if parms else None,
            "prio": parms["prio"] if parms else None,
            "bytes": basic["bytes"] if basic else 0,
            "packets": basic["packets"] if basic else 0,
            "drops": queue["drops"] if queue else 0,
        }
    return out


def ensure_bands(
    ipr: IPRoute, index: int, spec: QdiscSpec, major: int, parent: int, exists: bool
) -> list[str]:
    """Make the band qdisc ``major:`` under ``parent`` match ``spec``; returns changes."""
    if spec.backend == "prio":
        return [] if exists else _install_prio(ipr, index, spec, major, parent)
    changes = [] if exists else _install_htb(ipr, index, spec, major, parent)
    return changes + _ensure_htb_classes(ipr, index, spec, major, exists)


def _install_prio(ipr: IPRoute, index: int, spec: QdiscSpec, major: int, parent: int) -> list:
    # the band count is fixed by config; a config change restarts the agent
    ipr.tc(
        "replace",
        "prio",
        index=index,
        handle=major << 16,
        parent=parent,
        bands=spec.bands,
        priomap=[spec.default_band] * 16,
    )
    return [f"installed prio qdisc {major:x}: with {spec.bands} bands"]


def _install_htb(ipr: IPRoute, index: int, spec: QdiscSpec, major: int, parent: int) -> list:
    ipr.tc(
        "replace",
        "htb",
        index=index,
        handle=major << 16,
        parent=parent,
        default=spec.layout.minor(spec.default_band),
    )
    return [f"installed htb qdisc {major:x}: (strict-priority emulation)"]


def _ensure_htb_classes(
    ipr: IPRoute, index: int, spec: QdiscSpec, major: int, exists: bool
) -> list[str]:
    have = read_classes(ipr, index, {major}) if exists else {}
    want = {
        (major << 16) | c.minor: ((major << 16) | c.parent_minor, c.rate, c.ceil, c.prio)
        for c in strict_priority_classes(spec.bands, spec.rate_bps, spec.min_share)
    }
    changes = []
    for handle, (par, rate, ceil, prio) in want.items():
        cur = have.get(handle)
        if cur and (cur["rate"], cur["ceil"], cur["prio"]) == (rate, ceil, prio):
            continue
        op = "change-class" if cur else "add-class"
        ipr.tc(
            op,
            "htb",
            index=index,
            handle=handle,
            parent=par,
            rate=f"{rate * 8}bit",
            ceil=f"{ceil * 8}bit",
            prio=prio,
        )
        changes.append(f"{op} {handle >> 16:x}:{handle & 0xFFFF:x} prio {prio}")
    for handle in sorted(set(have) - set(want), reverse=True):
        ipr.tc("del-class", "htb", index=index, handle=handle)
        changes.append(f"removed stale class {handle >> 16:x}:{handle & 0xFFFF:x}")
    return changes
