"""A coordinator whose port is taken exits 2 with one line naming where the address
came from, even when the holder allows SO_REUSEPORT (as gRPC servers do by default)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

CONFIG = "docs/cluster.sample.yaml"


@pytest.fixture
def taken() -> Iterator[str]:
    """HOST:PORT held by a listening socket that allows SO_REUSEPORT."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield f"127.0.0.1:{s.getsockname()[1]}"


def coordinator(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "grouper.cli", "coordinator", "--config", CONFIG, *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_coordinator_on_a_taken_port_exits_2(taken):
    r = coordinator("--listen", taken, "--metrics", "127.0.0.1:0")
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1] == (
        f"grouper: error: --listen: cannot listen on '{taken}' "
        "(in use, or not an address of this host)"
    )


def test_a_coordinator_whose_metrics_port_is_taken_exits_2(taken):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        listen = f"127.0.0.1:{free.getsockname()[1]}"
    r = coordinator("--listen", listen, "--metrics", taken)
    assert r.returncode == 2, r.stderr
    assert r.stderr == (
        f"grouper: error: --metrics: cannot listen on '{taken}' (Address already in use)\n"
    )
