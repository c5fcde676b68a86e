"""Emulated hosts resolve each other's names at once (PyTorch's c10d store looks up
the name of every client's address; a resolver the emulated hosts cannot reach made
each rendezvous wait seconds)."""

from __future__ import annotations

import subprocess
import sys

from grouper.topologies.leafspine import Fabric, LeafSpine

LOOKUP = (
    "import socket, sys, time\n"
    "t = time.monotonic()\n"
    "name = socket.getnameinfo((sys.argv[1], 0), socket.NI_NAMEREQD)[0]\n"
    "print(name, round(time.monotonic() - t, 3))\n"
)


def test_a_process_started_on_the_fabric_resolves_a_peers_address_at_once():
    spec = LeafSpine(leaves=2, spines=1, hosts_per_leaf=1)
    fabric = Fabric(spec)
    try:
        fabric.start()
        proc = fabric.popen(
            "h1", [sys.executable, "-c", LOOKUP, spec.addresses["h2"]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        name, seconds = out.split()
        assert name == "h2" and float(seconds) < 0.5
        with open("/etc/hosts") as fh:
            assert spec.addresses["h2"] not in fh.read(), "the machine's /etc/hosts untouched"
    finally:
        fabric.stop()
    assert not fabric.hosts_file.exists()
