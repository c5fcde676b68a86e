"""Network namespaces joined by veths: the one builder the benches and the tests use.

:func:`add_netns` makes a named namespace (``ip netns add``) with loopback up;
:func:`veth` joins two namespaces (or two ends in one) with a veth pair, multi-queue if
asked, as fast NICs are; :func:`bridge` makes a switch of veth ends; :class:`NetnsPair`
is the common case: two namespaces, one veth, an address on each end. What a
:class:`NetnsPair` built is deleted by ``close`` (or on leaving a ``with`` block), also
when building failed half way. Uses ``ip`` (iproute2), as an operator would, so what a
test builds reads back with the same tool.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


def ip(*args: str) -> None:
    """``ip ARGS``; a failure raises ``RuntimeError`` with iproute2's own message."""
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def add_netns(name: str) -> None:
    """A namespace ``name`` with its loopback up."""
    ip("netns", "add", name)
    ip("-n", name, "link", "set", "lo", "up")


def del_netns(*names: str) -> None:
    """Delete the namespaces that exist among ``names`` (their links go with them)."""
    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


def veth(ns1: str, nic1: str, ns2: str, nic2: str, txqueues: int = 1) -> None:
    """A veth pair ``nic1`` in ``ns1`` <-> ``nic2`` in ``ns2``, ``txqueues`` TX and RX
    queues on each end."""
    mq = ("numtxqueues", str(txqueues), "numrxqueues", str(txqueues))
    ip("link", "add", nic1, "netns", ns1, *mq, "type", "veth",
       "peer", "name", nic2, "netns", ns2, *mq)  # fmt: skip


def bridge(ns: str, name: str, *ports: str) -> None:
    """A Linux bridge ``name`` in ``ns`` with ``ports`` (links already there) on it,
    all up: a switch."""
    ip("-n", ns, "link", "add", name, "type", "bridge")
    ip("-n", ns, "link", "set", name, "up")
    for port in ports:
        ip("-n", ns, "link", "set", port, "master", name, "up")


def address(ns: str, nic: str, cidr: str) -> None:
    """Give ``nic`` in ``ns`` the address ``cidr`` and bring it up."""
    ip("-n", ns, "addr", "add", cidr, "dev", nic)
    ip("-n", ns, "link", "set", nic, "up")


@dataclass
class NetnsPair:
    """Namespaces ``a`` and ``b`` joined by ``nic_a`` <-> ``nic_b``, addressed
    ``addr_a``/``prefix`` and ``addr_b``/``prefix``; built by ``open``."""

    a: str
    b: str
    addr_a: str
    addr_b: str
    nic_a: str = "gva"
    nic_b: str = "gvb"
    txqueues: int = 1
    prefix: int = 24

    def open(self) -> NetnsPair:
        try:
            add_netns(self.a)
            add_netns(self.b)
            veth(self.a, self.nic_a, self.b, self.nic_b, self.txqueues)
            address(self.a, self.nic_a, f"{self.addr_a}/{self.prefix}")
            address(self.b, self.nic_b, f"{self.addr_b}/{self.prefix}")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        del_netns(self.a, self.b)

    def __enter__(self) -> NetnsPair:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
