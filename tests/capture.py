"""Packet captures for kernel tests: tcpdump in a namespace, read back with scapy.

One way to capture, so every test gets the same guarantees: headers only (a small
snapshot length, so the capture ring holds thousands of packets, not the ~30 full-size
GSO frames a 2 MB ring holds at tcpdump's default), a large kernel buffer, and a stop
that first waits until the file stops growing. A capture that still lost packets in the
kernel fails with that said, never as a wrong DSCP or a missing connection.
"""

from __future__ import annotations

import re
import signal
import subprocess
import time
from pathlib import Path

from scapy.all import rdpcap

SNAPLEN = 160  # Ethernet + IPv6 + TCP with options, and a few payload bytes
BUFFER_KIB = 16384
SETTLE_S = 0.6  # the file unchanged this long: tcpdump has written what it got
SETTLE_MAX_S = 20.0


class Capture:
    """tcpdump on ``nic`` in namespace ``ns`` (started by ``popen``, e.g. a NetPair's)."""

    def __init__(self, popen, ns: str, nic: str, path: Path, bpf: str = "tcp") -> None:
        self.path = Path(path)
        self.proc = popen(
            ns, "tcpdump", "--immediate-mode", "-Z", "root", "-i", nic, "-U",
            "-s", str(SNAPLEN), "-B", str(BUFFER_KIB), "-w", str(self.path), bpf,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self._wait_listening()

    def _wait_listening(self) -> None:
        """tcpdump says "listening on" once its socket is bound; packets before that are
        not captured."""
        said = []
        while line := self.proc.stderr.readline():  # warnings may come first
            if "listening on" in line:
                return
            said.append(line.strip())
        self.proc.wait(timeout=10)
        raise AssertionError(f"tcpdump did not start: {' / '.join(said)}")

    def _settle(self) -> None:
        start = time.monotonic()
        size, since = -1, time.monotonic()
        while time.monotonic() - start < SETTLE_MAX_S:
            now = self.path.stat().st_size if self.path.exists() else 0
            if now != size:
                size, since = now, time.monotonic()
            elif time.monotonic() - since >= SETTLE_S:
                return
            time.sleep(0.1)

    def stop(self) -> list:
        """Waits for the file to settle, stops tcpdump, and returns the packets; fails if
        the kernel dropped any."""
        self._settle()
        self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        dropped = re.search(r"(\d+) packets? dropped by kernel", err or "")
        assert dropped is None or dropped.group(1) == "0", f"capture lost packets: {err}"
        return list(rdpcap(str(self.path)))
