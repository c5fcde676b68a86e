"""One strict-priority class tree (common/strict_priority.py): the agent's ``htb``
backend (pyroute2) and an emulated switch port (``tc`` commands) build the same classes,
read back from the kernel with ``tc -d class show``."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from grouper.common.queues import QueueConfig
from grouper.topologies.leafspine import switch_queue_commands

pytestmark = pytest.mark.root

AGENT = """
import sys
from pyroute2 import IPRoute
from grouper.agent.kernel.bands import QdiscSpec
from grouper.agent.kernel.qdisc import Qdisc
Qdisc(IPRoute(), sys.argv[1]).ensure(QdiscSpec("htb", 8, 1, int(sys.argv[2]), float(sys.argv[3])))
"""
CLASS = re.compile(r"^class htb \w+:(\w+) (?:parent \w+:(\w*)|root)")


def field(line: str, name: str) -> str | None:
    m = re.search(rf" {name} (\S+)", line)
    return m.group(1) if m else None


def classes(ns: str, dev: str) -> dict[int, tuple]:
    """minor -> (parent minor, prio, rate, ceil) as tc prints them."""
    out = subprocess.run(["tc", "-n", ns, "-d", "class", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    found = {}
    for line in out.splitlines():
        if m := CLASS.match(line):
            minor, parent = m.groups()
            prio = field(line, "prio")  # an inner class prints none (HTB ignores it)
            found[int(minor, 16)] = (
                int(parent or "0", 16),
                prio,
                field(line, "rate"),
                field(line, "ceil"),
            )
    return found


@pytest.mark.parametrize("mbps", [100, 12.5])
def test_agent_htb_and_switch_port_build_the_same_classes(pair, mbps):
    queues = QueueConfig()
    for cmd in switch_queue_commands(pair.nic_b, mbps, queues):
        pair.run(pair.b, *cmd.split())
    rate_bps = int(mbps * 1e6 / 8)
    agent = pair.run(pair.a, sys.executable, "-c", AGENT, pair.nic_a, str(rate_bps),
                     str(queues.min_share), check=False)  # fmt: skip
    assert agent.returncode == 0, agent.stderr
    switch, host = classes(pair.b, pair.nic_b), classes(pair.a, pair.nic_a)
    assert len(switch) == queues.queues + 1  # the parent and a leaf per band
    assert host == switch
    assert [switch[0x10 + b][1] for b in range(queues.queues)] == [
        str(b) for b in range(queues.queues)
    ]
