"""A routed leaf-spine, described declaratively and brought up with Mininet.

Why routed (L3 with ECMP) rather than bridges with STP: real clusters run routed
leaf-spine fabrics, STP would block all but one spine (no multipath), and this kernel
has no Open vSwitch module. Leaves and spines are Mininet nodes acting as routers;
leaves spread traffic to other leaves over every spine with ECMP
(``fib_multipath_hash_policy=1``: 5-tuple hash, so one TCP flow stays on one path).

Addressing: host k of leaf l is ``10.<l+1>.<k+1>.2/24`` behind its leaf at ``.1``;
leaf l and spine s meet on ``10.200.<l*S+s>.0/24`` (leaf .1, spine .2).

Every router egress port (toward hosts and uplinks) gets the cluster's priority
queues keyed by DSCP: strict priority emulated with HTB, the class tree of
:mod:`grouper.common.strict_priority` that the agents' ``htb`` backend builds too (tiny
guaranteed rate, ceil = link rate, prio = band), a shallow pfifo per band and a u32
``ip dsfield`` filter per code point of the DSCP table. Host NICs are left to the
agents, which install the same queues there.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grouper.common.queues import QueueConfig
from grouper.common.strict_priority import leaf_minor, strict_priority_classes
from grouper.pda.switch_queues import switch_queue_map
from grouper.topologies import congestion


@dataclass(frozen=True)
class LeafSpine:
    leaves: int = 2
    spines: int = 2
    hosts_per_leaf: int = 2
    mbps: float = 20.0
    queues: QueueConfig = field(default_factory=QueueConfig)
    uplink_mbps: float | None = None  # leaf-spine links; default: mbps
    # the agents' qdisc backend. ``prio`` does not shape and a veth has no line rate, so
    # with it each host reaches its leaf through a NIC node: a bridge whose port toward
    # the leaf runs at the host's rate with the DSCP strict-priority queues, standing in
    # for a NIC that serves the host's bands at line rate
    host_backend: str = "htb"
    cc: str = congestion.DEFAULT  # every host's TCP congestion control

    @property
    def nic_nodes(self) -> bool:
        return self.host_backend == "prio"

    @property
    def fabric_mbps(self) -> float:
        return self.uplink_mbps or self.mbps

    @property
    def host_names(self) -> list[str]:
        return [f"h{i + 1}" for i in range(self.leaves * self.hosts_per_leaf)]

    def host_address(self, i: int) -> str:
        leaf, k = divmod(i, self.hosts_per_leaf)
        return f"10.{leaf + 1}.{k + 1}.2"

    @property
    def addresses(self) -> dict[str, str]:
        return {h: self.host_address(i) for i, h in enumerate(self.host_names)}

    def simulator_topology(self) -> str:
        spec = f"leafspine:{self.leaves},{self.spines},{self.hosts_per_leaf},{self.mbps / 1000:g}"
        if self.uplink_mbps is not None:
            spec += f",uplink={self.uplink_mbps / 1000:g}"
        return spec


SWITCH_QUEUE_PACKETS = 100
# TCP payload per byte the HTB classes count: an MSS of 1448 (MTU 1500 less 20 IP, 20 TCP
# and 12 of timestamp option) in a 1514-byte frame (tc counts the Ethernet header)
PAYLOAD_SHARE = 1448 / 1514
RTO_MIN = "10ms"  # hosts' per-route TCP retransmission timeout floor


def strict_priority_commands(
    dev: str, mbps: float, bands: int, min_share: float, default_band: int
) -> list[str]:
    """tc commands giving ``dev`` strict priority over ``bands`` (the HTB tree of
    :mod:`grouper.common.strict_priority`, a shallow pfifo per band), unclassified
    packets in ``default_band``; the filters that choose a band are the caller's."""
    classes = strict_priority_classes(bands, int(mbps * 1e6 / 8), min_share)
    cmds = [f"tc qdisc replace dev {dev} root handle 1: htb default {leaf_minor(default_band):x}"]
    for c in classes:
        parent = f"1:{c.parent_minor:x}" if c.parent_minor else "1:"
        cmds.append(
            f"tc class add dev {dev} parent {parent} classid 1:{c.minor:x} htb "
            f"rate {c.rate * 8}bit ceil {c.ceil * 8}bit prio {c.prio} quantum 1514"
        )
    for band in range(bands):  # shallow buffers, as switch ports have
        cmds.append(
            f"tc qdisc add dev {dev} parent 1:{leaf_minor(band):x} handle {0x20 + band:x}: "
            f"pfifo limit {SWITCH_QUEUE_PACKETS}"
        )
    return cmds


def switch_queue_commands(dev: str, mbps: float, queues: QueueConfig) -> list[str]:
    """tc commands giving ``dev`` the cluster's DSCP-keyed strict-priority queues."""
    qmap = switch_queue_map(queues)  # the map grouper switch-config writes for switches
    cmds = strict_priority_commands(dev, mbps, queues.queues, queues.min_share, qmap.default_band)
    for band, dscp in enumerate(qmap.table):
        cmds.append(
            f"tc filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip "
            f"dsfield {dscp << 2:#x} 0xfc flowid 1:{leaf_minor(band):x}"
        )
    return cmds


class Fabric:
    """The running topology: Mininet net, host and router nodes."""

    def __init__(self, spec: LeafSpine) -> None:
        from mininet.link import Link
        from mininet.net import Mininet
        from mininet.node import Node

        self.spec = spec
        self.hosts_file: Path | None = None  # the fabric's /etc/hosts, made by start()
        self._kernel = ExitStack()  # what start() changed outside the fabric's namespaces
        self.net = Mininet(topo=None, controller=None, build=False, link=Link, autoSetMacs=True)
        net, s = self.net, spec
        self.hosts = [net.addHost(h, ip=None) for h in s.host_names]
        self.leaves = [net.addHost(f"leaf{i + 1}", cls=Node, ip=None) for i in range(s.leaves)]
        self.spines = [net.addHost(f"spine{i + 1}", cls=Node, ip=None) for i in range(s.spines)]
        self.switch_ports: dict[str, list[tuple[object, str]]] = {}
        self.host_ports: set[str] = set()  # router ports toward a host (the rest: uplinks)
        names = s.host_names if s.nic_nodes else []
        self.nics = [net.addHost(f"{h}nic", cls=Node, ip=None) for h in names]
        for i, h in enumerate(self.hosts):
            leaf = self.leaves[i // s.hosts_per_leaf]
            near = self.nics[i] if s.nic_nodes else leaf  # what the host's cable plugs into
            net.addLink(h, near, intfName1=f"{h.name}-eth0", intfName2=f"{near.name}-{h.name}")
            if s.nic_nodes:
                net.addLink(
                    near, leaf, intfName1=f"{near.name}-up", intfName2=f"{leaf.name}-{h.name}"
                )
            self.host_ports.add(f"{leaf.name}-{h.name}")
        for li, leaf in enumerate(self.leaves):
            for si, sp in enumerate(self.spines):
                net.addLink(
                    leaf, sp, intfName1=f"{leaf.name}-s{si + 1}", intfName2=f"{sp.name}-l{li + 1}"
                )

    def start(self) -> None:
        s = self.spec
        self._kernel.enter_context(congestion.allowed(s.cc))
        self._write_hosts_file()
        self.net.build()
        for node in self.leaves + self.spines:
            node.cmd("sysctl -qw net.ipv4.ip_forward=1 net.ipv4.fib_multipath_hash_policy=1")
        for i, h in enumerate(self.hosts):
            leaf = self.leaves[i // s.hosts_per_leaf]
            addr = s.host_address(i)
            gw = addr.rsplit(".", 1)[0] + ".1"
            h.cmd(f"ip addr add {addr}/24 dev {h.name}-eth0")
            # data-center RTO floor: starved low-band flows that lose packets at a full
            # switch queue come back in milliseconds, not 200 ms doubling per timeout
            h.cmd(f"ip route add default via {gw} rto_min {RTO_MIN}")
            h.cmd(
                f"ip route change {gw.rsplit('.', 1)[0]}.0/24 dev {h.name}-eth0 rto_min {RTO_MIN}"
            )
            # training hosts keep their congestion window across compute gaps
            h.cmd(
                f"sysctl -qw net.ipv4.tcp_slow_start_after_idle=0 {congestion.host_sysctls(s.cc)}"
            )
            leaf.cmd(f"ip addr add {gw}/24 dev {leaf.name}-{h.name}")
        for li, leaf in enumerate(self.leaves):
            for si, sp in enumerate(self.spines):
                net = f"10.200.{li * s.spines + si}"
                leaf.cmd(f"ip addr add {net}.1/24 dev {leaf.name}-s{si + 1}")
                sp.cmd(f"ip addr add {net}.2/24 dev {sp.name}-l{li + 1}")
        for li, leaf in enumerate(self.leaves):
            for other in range(s.leaves):
                if other == li:
                    continue
                hops = " ".join(
                    f"nexthop via 10.200.{li * s.spines + si}.2" for si in range(s.spines)
                )
                leaf.cmd(f"ip route add 10.{other + 1}.0.0/16 {hops}")
        for si, sp in enumerate(self.spines):
            for li in range(s.leaves):
                sp.cmd(f"ip route add 10.{li + 1}.0.0/16 via 10.200.{li * s.spines + si}.1")
        for node in self.leaves + self.spines:
            for intf in node.intfList():
                if intf.name != "lo":
                    mbps = s.mbps if intf.name in self.host_ports else s.fabric_mbps
                    self._queues(node, intf.name, mbps)
        for nic, h in zip(self.nics, self.hosts, strict=False):
            self._nic_node(nic, h.name)

    def _queues(self, node: Any, port: str, mbps: float) -> None:
        """The cluster's DSCP strict-priority queues on ``node``'s egress ``port``."""
        for cmd in switch_queue_commands(port, mbps, self.spec.queues):
            _run(node, cmd)
        self.switch_ports.setdefault(node.name, []).append((node, port))

    def _nic_node(self, nic: Any, host: str) -> None:
        """A bridge between ``host`` and its leaf; toward the leaf, the host's line rate
        and the DSCP queues (the NIC's hardware queues of a host whose qdisc is prio)."""
        for cmd in (
            "ip link add br0 type bridge",
            f"ip link set {nic.name}-{host} master br0",
            f"ip link set {nic.name}-up master br0",
            "ip link set br0 up",
        ):
            _run(nic, cmd)
        self._queues(nic, f"{nic.name}-up", self.spec.mbps)

    def host(self, name: str) -> object:
        return self.net.get(name)

    def popen(self, name: str, argv: list[str], **kw: object) -> subprocess.Popen:
        """``argv`` on host ``name`` with the fabric's names resolvable at once: in a
        mount namespace of its own, /etc/hosts is the fabric's (every host's address
        and name), so reverse lookups of peers (PyTorch's c10d store does one per
        client) answer from the file instead of waiting on a resolver the emulated
        hosts cannot reach. The machine's /etc/hosts is not touched."""
        assert self.hosts_file is not None, "start() the fabric first"
        bind = 'mount --bind "$0" /etc/hosts && exec "$@"'
        wrapped = ["unshare", "--mount", "--propagation", "private", "sh", "-c", bind,
                   str(self.hosts_file), *argv]  # fmt: skip
        return self.host(name).popen(wrapped, **kw)

    def _write_hosts_file(self) -> None:
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{addr} {name}" for name, addr in self.spec.addresses.items()]
        fd, path = tempfile.mkstemp(prefix="grouper-fabric-hosts-")
        with os.fdopen(fd, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        os.chmod(path, 0o644)
        self.hosts_file = Path(path)

    def netns_path(self, name: str) -> str:
        return f"/proc/{self.host(name).pid}/ns/net"

    def congestion_controls(self) -> dict[str, str]:
        """Each host's congestion control, as its namespace reports it."""
        key = "net.ipv4.tcp_congestion_control"
        return {h.name: h.cmd(f"sysctl -n {key}").strip() for h in self.hosts}

    def stop(self) -> None:
        try:
            self.net.stop()
            if self.hosts_file is not None:
                self.hosts_file.unlink(missing_ok=True)
        finally:
            self._kernel.close()


def _run(node: Any, cmd: str) -> None:
    """``cmd`` on a Mininet node; an error it prints stops the fabric's start."""
    out = node.cmd(cmd)
    if "rror" in out:
        raise RuntimeError(f"{node.name}: {cmd}: {out.strip()}")
