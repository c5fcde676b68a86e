"""The NIC's root qdisc, through netlink (pyroute2): where our band qdiscs hang.

* Single-queue NIC (or ``agent.multiqueue: single``): one band qdisc ``4752:`` as root.
* Multi-queue NIC: the multiqueue root is kept, as ``mq 4752:``, and every TX queue
  gets its own band qdisc (``agent/kernel/bands.py``) with a steering filter
  (``agent/kernel/steer.py``), so queues keep their own locks. Strict priority then
  holds among the packets of one TX queue; a socket stays on one queue.

``ensure`` is idempotent: it reads the kernel's state, compares it with the desired
one and changes only what differs; a qdisc of ours is kept (never rebuilt for a plan
change). What is ours is recognised by the root handle ``4752:``; removing that root
removes everything below it and the kernel restores its default.
"""

from __future__ import annotations

import logging
import secrets

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from grouper.agent.kernel import steer
from grouper.agent.kernel.bands import HTB_MAX_BANDS, QdiscSpec, ensure_bands, read_classes
from grouper.agent.kernel.layout import HANDLE, HANDLE_MAJOR, MAX_TX_QUEUES, BandLayout, child_major

log = logging.getLogger("grouper.agent.qdisc")

# Root qdiscs the kernel installs by itself; replacing them loses nothing.
KERNEL_DEFAULTS = {"noqueue", "mq", "pfifo_fast", "fq_codel", "fq", "pfifo", "noop"}
ROOT = 0xFFFFFFFF

__all__ = ["Qdisc", "QdiscError", "QdiscSpec", "probe_backend"]


class QdiscError(RuntimeError):
    pass


def probe_backend(ipr: IPRoute) -> tuple[str, str]:
    """(``prio`` or ``htb``, why): ``prio`` when the kernel takes one on a throwaway link.

    The link is a dummy, or a veth pair where the kernel has no dummy driver, with a
    name of its own (a link left over by a crashed agent, or another agent probing at
    the same moment, cannot make the probe fail); it is deleted before this returns.
    """
    name = f"grp{secrets.token_hex(6)}"  # 15 characters: IFNAMSIZ - 1
    errors = []
    for kind, extra in (("dummy", {}), ("veth", {"peer": f"grq{name[3:]}"})):
        try:
            ipr.link("add", ifname=name, kind=kind, **extra)
            break
        except NetlinkError as exc:
            errors.append(f"{kind}: {exc}")
    else:
        return "htb", f"no probe link could be made ({'; '.join(errors)})"
    try:
        idx = ipr.link_lookup(ifname=name)[0]
        ipr.tc("add", "prio", index=idx, handle=0x10000, bands=3)
        return "prio", "the kernel has the prio qdisc"
    except NetlinkError as exc:
        return "htb", f"the kernel refused a prio qdisc ({exc})"
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
        link = ipr.get_links(self.index)[0]
        self.tx_queues = int(link.get_attr("IFLA_NUM_TX_QUEUES") or 1)

    # -- reading --------------------------------------------------------------------
    def _qdiscs(self) -> dict[int, tuple[str, int]]:
        """parent -> (kind, handle) of every qdisc on the NIC."""
        return {
            q["parent"]: (q.get_attr("TCA_KIND"), q["handle"])
            for q in self.ipr.get_qdiscs(index=self.index)
        }

    def root(self) -> tuple[str, int] | None:
        return self._qdiscs().get(ROOT)

    def is_ours(self) -> bool:
        root = self.root()
        return root is not None and root[1] >> 16 == HANDLE_MAJOR

    def shape(self, spec: QdiscSpec) -> str:
        """``mq`` (a band qdisc per TX queue) or ``single`` (one band qdisc as root)."""
        if spec.multiqueue and 1 < self.tx_queues <= MAX_TX_QUEUES and steer.available():
            return "mq"
        return "single"

    def band_majors(self) -> set[int]:
        root = self.root()
        if root is None or root[1] >> 16 != HANDLE_MAJOR:
            return set()
        if root[0] != "mq":
            return {HANDLE_MAJOR}
        return {child_major(q) for q in range(self.tx_queues)}

    def counters(self, layout: BandLayout) -> dict[int, dict]:
        """Per-band bytes, packets and drops, summed over our band qdiscs."""
        out: dict[int, dict] = {}
        for handle, c in read_classes(self.ipr, self.index, self.band_majors()).items():
            band = layout.band_of_minor(handle & 0xFFFF)
            if band is None:
                continue
            total = out.setdefault(band, {"bytes": 0, "packets": 0, "drops": 0})
            for k in total:
                total[k] += int(c[k] or 0)
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
        shape = self.shape(spec)
        want_kind = "mq" if shape == "mq" else spec.backend
        kind = root[0] if root is not None and root[1] >> 16 == HANDLE_MAJOR else None
        if kind is not None and kind != want_kind:
            self.remove()
            changes.append(f"removed our {kind} root (now {want_kind})")
            kind = None
        if shape == "single":
            return changes + ensure_bands(
                self.ipr, self.index, spec, HANDLE_MAJOR, ROOT, kind == spec.backend
            )
        if kind is None:
            self.ipr.tc("replace", "mq", index=self.index, handle=HANDLE, parent=ROOT)
            changes.append(f"installed mq qdisc {HANDLE_MAJOR:x}: over {self.tx_queues} TX queues")
        return changes + self._ensure_children(spec)

    def _ensure_children(self, spec: QdiscSpec) -> list[str]:
        qdiscs = self._qdiscs()
        changed: list[int] = []
        count = 0
        for q in range(self.tx_queues):
            major, parent = child_major(q), HANDLE | (q + 1)
            exists = qdiscs.get(parent) == (spec.backend, major << 16)
            changes = ensure_bands(self.ipr, self.index, spec, major, parent, exists)
            if not (exists and steer.attached(self.ipr, self.index, major)):
                steer.attach(self.ipr, self.index, major)
                changes.append("steering filter")
            if changes:
                changed.append(q)
                count += len(changes)
        if not changed:
            return []
        return [
            f"{spec.backend} band qdiscs and steering filters on {len(changed)} of "
            f"{self.tx_queues} TX queues ({count} netlink changes)"
        ]

    def remove(self) -> bool:
        """Delete the root qdisc if it is ours; the kernel restores its default."""
        if not self.is_ours():
            return False
        self.ipr.tc("del", index=self.index, handle=HANDLE, parent=ROOT)
        return True
