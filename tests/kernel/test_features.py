"""Kernel features probed at the agent's start (agent/kernel/features.py), on the real
kernel, in a namespace of the test's own: the probe says what it found and leaves no
table behind."""

from __future__ import annotations

import subprocess
import sys

from tests.netns import nft_json

PROBE = (
    "from grouper.agent.kernel.features import cgroup_match\n"
    "from grouper.agent.kernel.nft import Nft\n"
    "print(repr(cgroup_match(Nft())))\n"
)


def test_the_cgroup_match_probe_finds_nft_socket_and_leaves_nothing(pair):
    out = subprocess.run(
        ["nsenter", f"--net=/var/run/netns/{pair.a}", sys.executable, "-c", PROBE],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert out.strip() == "''", f"this kernel has nft_socket with cgroupv2: {out}"
    assert not [o for o in nft_json(pair.a) if "table" in o], "the probe's table is gone"
