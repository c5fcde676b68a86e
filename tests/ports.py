"""Ports for test daemons, assigned by the OS instead of fixed in the test (a fixed port
fails when another test, worker or daemon on the machine holds it)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS just assigned on ``host`` and released, for a daemon that takes
    its port from a config file and cannot report one it chose itself."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
