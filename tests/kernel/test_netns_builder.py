"""The one namespace builder (agent/kernel/netns.py), read back with iproute2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from grouper.agent.kernel.netns import NetnsPair, add_netns, bridge, del_netns, veth

pytestmark = pytest.mark.root


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "-j", "netns", "list"], capture_output=True, text=True).stdout
    return {n["name"] for n in json.loads(out or "[]")}


def link(ns: str, dev: str) -> dict:
    out = subprocess.run(
        ["ip", "-n", ns, "-j", "-d", "addr", "show", "dev", dev],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return json.loads(out)[0]


LISTEN = "import socket; s = socket.create_server(('', 7999)); print(1, flush=True); s.accept()"
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], 7999), timeout=5)"


def reaches(src: str, dst: str, addr: str) -> bool:
    """A TCP connection from namespace ``src`` to ``addr``:7999 in ``dst`` succeeds."""
    server = subprocess.Popen(
        ["ip", "netns", "exec", dst, sys.executable, "-c", LISTEN],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "1"
        client = subprocess.run(
            ["ip", "netns", "exec", src, sys.executable, "-c", CONNECT, addr], timeout=30
        )
        return client.returncode == 0
    finally:
        server.kill()
        server.wait()


def test_a_pair_is_two_namespaces_one_multiqueue_veth_and_addresses_then_nothing():
    tag = os.getpid() % 100000
    pair = NetnsPair(f"gnb{tag}a", f"gnb{tag}b", "10.79.0.1", "10.79.0.2", txqueues=3)
    with pair:
        assert {pair.a, pair.b} <= namespaces()
        a = link(pair.a, "gva")
        assert a["linkinfo"]["info_kind"] == "veth" and a["num_tx_queues"] == 3
        assert "UP" in a["flags"]
        assert [x["local"] for x in a["addr_info"] if x["family"] == "inet"] == ["10.79.0.1"]
        assert "UP" in link(pair.a, "lo")["flags"]
        assert reaches(pair.a, pair.b, "10.79.0.2")
    assert not {pair.a, pair.b} & namespaces()


def test_a_pair_that_fails_half_way_leaves_nothing():
    tag = os.getpid() % 100000
    pair = NetnsPair(f"gnb{tag}c", f"gnb{tag}d", "10.79.1.1", "not-an-address")
    with pytest.raises(RuntimeError, match="not-an-address"):
        pair.open()
    assert not {pair.a, pair.b} & namespaces()


def test_a_bridge_switches_between_its_ports():
    tag = os.getpid() % 100000
    s, h1, h2 = f"gnb{tag}s", f"gnb{tag}h1", f"gnb{tag}h2"
    try:
        for ns in (s, h1, h2):
            add_netns(ns)
        veth(h1, "eth0", s, "p1")
        veth(h2, "eth0", s, "p2")
        bridge(s, "br0", "p1", "p2")
        for ns, addr in ((h1, "10.79.2.1/24"), (h2, "10.79.2.2/24")):
            subprocess.run(["ip", "-n", ns, "addr", "add", addr, "dev", "eth0"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "eth0", "up"], check=True)
        assert link(s, "p1")["master"] == "br0"
        assert reaches(h1, h2, "10.79.2.2")
    finally:
        del_netns(s, h1, h2)
    assert not {s, h1, h2} & namespaces()
