"""TCP congestion control of the emulated hosts: checked, allowed, and restored.

A network namespace starts with the initial namespace's default congestion control, and
may select another only if it is in ``tcp_allowed_congestion_control`` (a setting of the
initial namespace). The fabric asks for one explicitly, so that a result says what it
was measured with instead of inheriting the machine's default: ``allowed`` adds it to
the allowed list for the fabric's life and puts the list back as it found it.
DCTCP also needs ECN negotiated by the hosts and marked by the switch queues.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from grouper.common.errors import ConfigError

CHOICES = ("cubic", "bbr", "dctcp", "reno")
DEFAULT = "bbr"  # the default of the machines every emulated figure was measured on
SYSCTL = Path("/proc/sys/net/ipv4")


def available() -> list[str]:
    return (SYSCTL / "tcp_available_congestion_control").read_text().split()


def check(cc: str) -> None:
    """Exit-2 error unless this kernel has ``cc`` (loading its module if it can)."""
    if cc not in CHOICES:
        raise ConfigError("--cc", f"unknown congestion control {cc[:20]!r} (known: "
                          f"{', '.join(CHOICES)})")  # fmt: skip
    if cc in available():
        return
    subprocess.run(["modprobe", "-q", f"tcp_{cc}"], capture_output=True, check=False)
    if cc not in available():
        raise ConfigError("--cc", f"this kernel has no {cc} (available: {' '.join(available())})")


def host_sysctls(cc: str) -> str:
    """The ``sysctl -w`` arguments an emulated host runs to use ``cc``."""
    settings = [f"net.ipv4.tcp_congestion_control={cc}"]
    if cc == "dctcp":
        settings.append("net.ipv4.tcp_ecn=1")
    return " ".join(settings)


@contextmanager
def allowed(cc: str) -> Iterator[None]:
    """``cc`` in the allowed list while the block runs; the list as it was afterwards."""
    check(cc)
    path = SYSCTL / "tcp_allowed_congestion_control"
    before = path.read_text().split()
    if cc not in before:
        path.write_text(" ".join([*before, cc]))
    try:
        yield
    finally:
        if cc not in before:
            path.write_text(" ".join(before))
