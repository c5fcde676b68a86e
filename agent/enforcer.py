"""Puts plans into the kernel of this host: qdisc once, nftables map elements per plan.

``start`` reconciles whatever an earlier (killed) agent left: our qdisc is kept and
repaired, our nftables table is replaced with an empty one in one transaction. ``apply``
diffs the desired rules with the ones in force and commits the difference as one
transaction. ``stop`` removes exactly what the agent installed.
"""

from __future__ import annotations

import logging
import platform
from typing import Any

from pyroute2 import IPRoute

from grouper.agent.kernel import nft_cgroup, nft_rules
from grouper.agent.kernel.bands import QdiscSpec
from grouper.agent.kernel.layout import BandLayout
from grouper.agent.kernel.nft import Nft, NftError
from grouper.agent.kernel.qdisc import Qdisc, probe_backend
from grouper.agent.plan import Rule, RuleKey
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig

log = logging.getLogger("grouper.agent")


class Enforcer:
    def __init__(
        self,
        nic: str,
        queues: QueueConfig,
        link_mbps: float,
        *,
        backend: str = "auto",
        control_ports: tuple[int, ...] = (),
        multiqueue: bool = True,
    ) -> None:
        self.nic = nic
        self.queues = queues
        self.control_ports = control_ports
        self.ipr = IPRoute()
        self.nft = Nft()
        if backend == "auto":
            self.backend, self.backend_reason = probe_backend(self.ipr)
        else:
            self.backend, self.backend_reason = backend, "configured"
        self.spec = QdiscSpec(
            self.backend,
            queues.queues,
            queues.default_band,
            int(link_mbps * 1e6 / 8),
            queues.min_share,
            multiqueue,
        )
        self.layout: BandLayout = self.spec.layout
        self.qdisc = Qdisc(self.ipr, nic)
        self.shape = self.qdisc.shape(self.spec)  # "mq" (per TX queue) or "single"
        self.rules: dict[RuleKey, Rule] = {}

    def start(self) -> list[str]:
        changes = self.qdisc.ensure(self.spec)
        try:
            stale = self.nft.table_exists(nft_rules.FAMILY, nft_rules.TABLE)
            self._replace({})
        except NftError as exc:  # a kernel without what the table needs: one line, exit 2
            first = str(exc).splitlines()[0] if str(exc) else "refused"
            raise ConfigError(
                "kernel", f"Linux {platform.release()}: nftables refused the agent's table: {first}"
            ) from None
        changes.append("replaced stale nftables table" if stale else "installed nftables table")
        for c in changes:
            log.info("%s: %s", self.nic, c)
        return changes

    def _replace(self, rules: dict[RuleKey, Rule]) -> None:
        self.nft.run(
            nft_rules.render_table(self.nic, self.queues, self.layout, self.control_ports, rules)
        )
        self.rules = dict(rules)

    def apply(self, rules: dict[RuleKey, Rule]) -> int:
        """Commit the difference to ``rules`` in one transaction; returns #changed.
        A change to a cgroup rule replaces the whole table (also one transaction): the
        kernel resolves cgroup paths when rules load, and cannot delete an element whose
        cgroup is gone."""
        old = self.rules
        diff = nft_rules.changed_keys(old, rules)
        if not diff:
            return 0
        if any(nft_cgroup.is_cgroup_key(k) for k in diff):
            self._replace(rules)
        else:
            self.nft.run(nft_rules.render_changes(old, rules, self.layout, diff))
            self.rules = dict(rules)
        return len(diff)

    def reload(self) -> None:
        """Load the rules in force again: a job's cgroup was made again under its name,
        with a new id the rules loaded before do not match."""
        self._replace(self.rules)

    def reconcile(self) -> bool:
        """Repair drift (someone flushed or edited our table/qdisc). True if repaired."""
        repaired = bool(self.qdisc.ensure(self.spec))
        try:
            actual = self.actual_rules()
        except (KeyError, ValueError, RuntimeError):
            actual = None
        if actual != self._comparable(self.rules):
            self._replace(self.rules)
            repaired = True
        if repaired:
            log.warning("%s: kernel state drifted from the plan; repaired", self.nic)
        return repaired

    @staticmethod
    def _comparable(rules: dict[RuleKey, Rule]) -> dict[RuleKey, Rule]:
        """What ``actual_rules`` reads back: the maps keyed by addresses and ports.
        Cgroup maps are only checked to exist: listing their elements makes nftables
        search the whole cgroup tree for each element's path (seen here: 6 s of CPU for
        251 elements, every reconcile)."""
        return {k: r for k, r in rules.items() if not nft_cgroup.is_cgroup_key(k)}

    def actual_rules(self) -> dict[RuleKey, Rule]:
        """The rules in the kernel, read back from ``nft -j``-style JSON (cgroup maps:
        see ``_comparable``; a missing one raises, so the table is loaded again)."""
        where = f"{nft_rules.FAMILY} {nft_rules.TABLE}"
        terse = self.nft.list_json(f"table {where}", terse=True)
        have = {o["map"]["name"] for o in terse if "map" in o}
        if not {f"band_{k[0]}" for k in self.rules if nft_cgroup.is_cgroup_key(k)} <= have:
            raise ValueError("a cgroup map is missing")
        objs = [
            o
            for field in ("band", "dscp")
            for match in nft_rules.MATCHES
            for o in self.nft.list_json(f"map {where} {field}_{match}")
        ]
        band: dict[RuleKey, int] = {}
        dscp: dict[RuleKey, int] = {}
        for o in objs:
            m = o.get("map")
            if not m:
                continue
            field, match = m["name"].split("_", 1)
            for key, value in _elements(m):
                rk = (match, *(int(x) if isinstance(x, int) else x for x in key["concat"]))
                if field == "band":
                    minor = int(str(value).split(":")[1], 16)
                    b = self.layout.band_of_minor(minor)
                    if b is None:
                        raise ValueError(f"classid {value} is not one of our bands")
                    band[rk] = b
                else:
                    dscp[rk] = int(value["goto"]["target"].rsplit("_", 1)[1])
        if band.keys() != dscp.keys():
            raise ValueError("band and dscp maps disagree")
        return {k: Rule(band[k], dscp[k]) for k in band}

    def counters(self) -> dict[int, dict]:
        return self.qdisc.counters(self.layout)

    def stop(self) -> None:
        """Remove exactly what we installed: our table and our root qdisc (also after a
        start that nftables refused: the qdisc came first)."""
        try:
            if self.nft.table_exists(nft_rules.FAMILY, nft_rules.TABLE):
                self.nft.run(nft_rules.delete_table())
                log.info("%s: removed nftables table %s", self.nic, nft_rules.TABLE)
        except NftError as exc:  # no nftables in this kernel: we have no table there
            log.warning("%s: nftables unavailable, no table to remove: %s", self.nic, exc)
        if self.qdisc.remove():
            log.info("%s: removed %s qdisc", self.nic, self.backend)
        self.rules = {}

    def close(self) -> None:
        self.nft.close()
        self.ipr.close()


def _elements(m: dict[str, Any]) -> list[tuple[Any, Any]]:
    out = []
    for e in m.get("elem", []):
        if isinstance(e, dict) and "elem" in e:  # elements with extra attributes
            e = e["elem"]["val"]
        out.append((e[0], e[1]))
    return out


class KernelThread:
    """Runs an :class:`Enforcer` on one dedicated thread, with an async facade.

    Netlink and libnftables calls block (briefly); running them on one worker thread
    keeps the event loop free and serialises every kernel change.
    """

    def __init__(self, *args: Any, **kw: Any) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kernel")
        self.enforcer: Enforcer = self._pool.submit(Enforcer, *args, **kw).result()
        self.backend = self.enforcer.backend

    async def call(self, fn: Any, *args: Any) -> Any:
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def apply(self, rules: dict[RuleKey, Rule]) -> int:
        return await self.call(self.enforcer.apply, rules)

    async def counters(self) -> dict[int, dict]:
        return await self.call(self.enforcer.counters)

    async def reload(self) -> None:
        await self.call(self.enforcer.reload)

    def run_sync(self, fn: Any, *args: Any) -> Any:
        return self._pool.submit(fn, *args).result()

    def close(self) -> None:
        try:
            self.run_sync(self.enforcer.close)
        finally:
            self._pool.shutdown(wait=True)
