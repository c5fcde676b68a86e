"""With ``prio`` agents (which do not shape), each emulated host reaches its leaf through
a NIC node: a bridge whose uplink runs at the host's rate with the DSCP strict-priority
queues, so a host's own bands still meet at its line rate."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from grouper.common.queues import QueueConfig
from grouper.topologies.leafspine import Fabric, LeafSpine
from tests.netns import ROOT

TCP_TOOL = str(ROOT / "tests" / "tcp_tool.py")


def sent_bytes(node, dev: str) -> dict[str, int]:
    """classid -> bytes sent, from ``tc -s class show`` (iproute2 prints no JSON for htb
    classes)."""
    out = node.cmd(f"tc -s class show dev {dev}")
    return {m[1]: int(m[2]) for m in re.finditer(r"class htb (\S+) .*?\n\s*Sent (\d+) bytes", out)}


def test_a_prio_host_sends_through_a_nic_node_that_serves_its_bands_by_dscp():
    q = QueueConfig()
    # h1 sends to h2 and to h3: their leaf ports are apart, h1's line is all they share
    spec = LeafSpine(leaves=1, spines=1, hosts_per_leaf=3, mbps=20, host_backend="prio")
    fabric = Fabric(spec)
    procs: list[subprocess.Popen] = []
    try:
        fabric.start()
        nic = fabric.host("h1nic")
        assert "qdisc htb 1: root" in nic.cmd("tc qdisc show dev h1nic-up")
        assert "htb" not in fabric.host("h1").cmd("tc qdisc show dev h1-eth0")  # the agent's
        for host in ("h2", "h3"):
            sink = fabric.popen(host, [sys.executable, TCP_TOOL, "sink", "5001"],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
            procs.append(sink)
            assert sink.stdout is not None and sink.stdout.readline().strip() == "ready"

        def send(host: str, size: int, band: int) -> subprocess.Popen:
            tos = str(q.dscp_table[band] << 2)
            p = fabric.popen("h1", [sys.executable, TCP_TOOL, "send", spec.addresses[host],
                                    "5001", str(size), "--tos", tos])  # fmt: skip
            procs.append(p)
            return p

        low = send("h3", 20_000_000, 6)  # 8 s alone at 20 Mbit/s
        time.sleep(1.0)  # the low band has the line
        before = sent_bytes(nic, "h1nic-up")
        send("h2", 2_500_000, 1)  # exits once its bytes are in the socket buffer
        deadline = time.monotonic() + 30
        while (after := sent_bytes(nic, "h1nic-up"))["1:11"] - before["1:11"] < 2_500_000:
            assert time.monotonic() < deadline, "band 1's transfer did not cross the NIC"
            time.sleep(0.05)
        assert low.poll() is None, "the low band's transfer was still running"
        high_d = after["1:11"] - before["1:11"]
        low_d = after["1:16"] - before["1:16"]
        assert low_d < 0.2 * high_d, (high_d, low_d)  # fair sharing would give ~1
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        fabric.stop()
