"""The priority qdisc on the NIC, through netlink (pyroute2).

Two backends, chosen by probing unless configured:

* ``prio``: ``tc prio`` with one band per queue (real hosts have it);
* ``htb``: strict priority emulated with HTB: one parent class at the link rate, one
  leaf per band with a tiny guaranteed rate, ``ceil`` = link rate and ``prio`` = band.

``ensure`` is idempotent: it reads the kernel's state, compares it with the desired
one and changes only what differs; an existing qdisc of ours is kept (never rebuilt
for a plan change). What is ours is recognised by the handle ``4752:``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from agent.kernel.layout import HANDLE, HANDLE_MAJOR, HTB_PARENT_MINOR, BandLayout

log = logging.getLogger("grouper.agent.qdisc")

# Root qdiscs the kernel installs by itself; replacing them loses nothing.
KERNEL_DEFAULTS = {"noqueue", "mq", "pfifo_fast", "fq_codel", "fq", "pfifo", "noop"}
HTB_MAX_BANDS = 8  # HTB class prio is 0..7


class QdiscError(RuntimeError):
    pass


@dataclass(frozen=True)
class QdiscSpec:
    backend: str
    bands: int
    default_band: int
    rate_bps: int  # link rate, bytes per second (HTB only)
    min_share: float = 0.001  # of the link, guaranteed to every band (HTB only)

    @property
    def layout(self) -> BandLayout:
        return BandLayout(self.backend, self.bands)

    def leaf_rate(self) -> int:
        """HTB leaves' guaranteed rate: ``min_share`` of the link, at least 1 kB/s."""
        return max(int(self.rate_bps * self.min_share), 1000)


def probe_backend(ipr: IPRoute) -> str:
    """``prio`` when the kernel has it, else ``htb``: try it on a throwaway dummy link."""
    name = "grouper-probe"
    try:
        ipr.link("add", ifname=name, kind="dummy")
    except NetlinkError:
        return "htb"
    try:
        idx = ipr.link_lookup(ifname=name)[0]
        ipr.tc("add", "prio", index=idx, handle=0x10000, bands=3)
        return "prio"
    except NetlinkError:
        return "htb"
    finally:
        try:
            ipr.link("del", ifname=name)
        except NetlinkError:
            pass


class Qdisc:
    def __init__(self, ipr: IPRoute, nic: str) -> None:
        self.ipr = ipr
        self.nic = nic
        found = ipr.link_lookup(ifname=nic)
        if not found:
            raise QdiscError(f"no interface {nic!r}")
        self.index = found[0]

    # -- reading --------------------------------------------------------------------
    def root(self) -> tuple[str, int] | None:
        for q in self.ipr.get_qdiscs(index=self.index):
            if q["parent"] == 0xFFFFFFFF:
                return q.get_attr("TCA_KIND"), q["handle"]
        return None

    def is_ours(self) -> bool:
        root = self.root()
        return root is not None and root[1] >> 16 == HANDLE_MAJOR

    def classes(self) -> dict[int, dict]:
        out = {}
        for c in self.ipr.get_classes(index=self.index):
            if c["handle"] >> 16 != HANDLE_MAJOR:
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

    def counters(self, layout: BandLayout) -> dict[int, dict]:
        """Per-band bytes, packets and drops from the qdisc's class statistics."""
        out = {}
        for handle, c in self.classes().items():
            band = layout.band_of_minor(handle & 0xFFFF)
            if band is not None:
                out[band] = {k: int(c[k] or 0) for k in ("bytes", "packets", "drops")}
        return out

    # -- changing -------------------------------------------------------------------
    def ensure(self, spec: QdiscSpec) -> list[str]:
        """Make the kernel match ``spec``; returns what was changed (for the log)."""
        if spec.backend == "htb" and spec.bands > HTB_MAX_BANDS:
            raise QdiscError(f"htb backend supports at most {HTB_MAX_BANDS} bands")
        changes: list[str] = []
        root = self.root()
        if root is not None and root[1] >> 16 != HANDLE_MAJOR and root[0] not in KERNEL_DEFAULTS:
            raise QdiscError(
                f"{self.nic} has a root qdisc {root[0]} {root[1] >> 16:x}: not installed by "
                "grouper; remove it or use another interface"
            )
        kind = root[0] if root else None
        if root is not None and root[1] >> 16 == HANDLE_MAJOR and kind != spec.backend:
            self.remove()
            changes.append(f"removed our {kind} root (backend is now {spec.backend})")
            kind = None
        if spec.backend == "prio":
            changes += self._ensure_prio(spec, kind == "prio")
        else:
            changes += self._ensure_htb(spec, kind == "htb")
        return changes

    def _ensure_prio(self, spec: QdiscSpec, exists: bool) -> list[str]:
        if exists:
            return []  # band count fixed by config; a config change restarts the agent
        priomap = [spec.default_band] * 16
        self.ipr.tc(
            "replace", "prio", index=self.index, handle=HANDLE, bands=spec.bands, priomap=priomap
        )
        return [f"installed prio qdisc {HANDLE_MAJOR:x}: with {spec.bands} bands"]

    def _ensure_htb(self, spec: QdiscSpec, exists: bool) -> list[str]:
        layout = spec.layout
        changes = []
        if not exists:
            self.ipr.tc(
                "replace",
                "htb",
                index=self.index,
                handle=HANDLE,
                default=layout.minor(spec.default_band),
            )
            changes.append(f"installed htb qdisc {HANDLE_MAJOR:x}: (strict-priority emulation)")
        have = self.classes() if exists else {}
        parent = HANDLE | HTB_PARENT_MINOR
        want = {parent: (HANDLE, spec.rate_bps, spec.rate_bps, 0)}
        for b in range(spec.bands):
            want[layout.classid(b)] = (parent, spec.leaf_rate(), spec.rate_bps, b)
        for handle, (par, rate, ceil, prio) in want.items():
            cur = have.get(handle)
            if cur and (cur["rate"], cur["ceil"], cur["prio"]) == (rate, ceil, prio):
                continue
            op = "change-class" if cur else "add-class"
            self.ipr.tc(
                op,
                "htb",
                index=self.index,
                handle=handle,
                parent=par,
                rate=f"{rate * 8}bit",
                ceil=f"{ceil * 8}bit",
                prio=prio,
            )
            changes.append(f"{op} {handle >> 16:x}:{handle & 0xFFFF:x} prio {prio}")
        for handle in sorted(set(have) - set(want), reverse=True):
            self.ipr.tc("del-class", "htb", index=self.index, handle=handle)
            changes.append(f"removed stale class {handle >> 16:x}:{handle & 0xFFFF:x}")
        return changes

    def remove(self) -> bool:
        """Delete the root qdisc if it is ours; the kernel restores its default."""
        if not self.is_ours():
            return False
        self.ipr.tc("del", index=self.index, handle=HANDLE, parent=0xFFFFFFFF)
        return True
