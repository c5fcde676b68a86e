"""Every emulated host runs the congestion control the fabric was asked for, whatever
the machine's default, and the machine's allowed list is put back afterwards."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grouper.topologies import congestion
from grouper.topologies.leafspine import Fabric, LeafSpine

ALLOWED = congestion.SYSCTL / "tcp_allowed_congestion_control"
SINK = (
    "import socket\n"
    "s = socket.create_server(('0.0.0.0', 5301))\n"
    "print('ready', flush=True)\n"
    "c, _ = s.accept()\n"
    "while c.recv(65536):\n"
    "    pass\n"
)
SEND = (
    "import socket, sys, time\n"
    "s = socket.create_connection((sys.argv[1], 5301))\n"
    "print('connected', flush=True)\n"
    "end = time.monotonic() + 5\n"
    "while time.monotonic() < end:\n"
    "    s.send(b'x' * 65536)\n"
)


def connection_cc(fabric: Fabric, host: str) -> set[str]:
    """The congestion control `ss -ti` reports for each TCP connection of ``host`` to
    port 5301 (the word after the timer fields: ``cubic``, ``bbr``, ...)."""
    out = fabric.host(host).cmd("ss -tinH dport = :5301")
    names = set(congestion.CHOICES)
    return {word for word in out.split() if word in names}


@pytest.mark.parametrize("cc", ["cubic", "bbr"])
def test_every_host_runs_the_congestion_control_asked_for(cc):
    allowed_before = ALLOWED.read_text()
    spec = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1, cc=cc)
    fabric = Fabric(spec)
    procs: list[subprocess.Popen] = []
    try:
        fabric.start()
        assert fabric.congestion_controls() == {"h1": cc, "h2": cc}
        sink = fabric.popen("h2", [sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
        procs.append(sink)
        assert sink.stdout.readline().strip() == "ready"
        send = fabric.popen(
            "h1", [sys.executable, "-c", SEND, spec.addresses["h2"]],
            stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(send)
        assert send.stdout.readline().strip() == "connected"
        assert connection_cc(fabric, "h1") == {cc}, fabric.host("h1").cmd("ss -tin")
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=10)
        fabric.stop()
    assert ALLOWED.read_text() == allowed_before, "the allowed list left as it was"
