"""Test traffic on request: the agent's side of ``grouper calibrate --config``.

Calibration on real hosts needs traffic between them that the operator can start from
one place. The coordinator's identity (see ``agent.authz``) asks one agent to open k
listening sockets on its data address (``listen``), then asks both agents to run at
once (``run``): the listener accepts the k connections, the other end makes them, and
both run one untimed and ``rounds`` timed rounds of k two-host ring all-reduces of M
bytes, exactly as the traffic generator's ring does (2 steps; in each, either end sends
M/2 and waits for the other's M/2, every payload byte checked by ``common.wire``).

Limits keep a caller from using this as a traffic cannon: at most 16 tasks, 1 GiB per
all-reduce and 64 rounds; one probe at a time per host; listening sockets close when
their Probe ends or after ``LISTEN_TTL`` seconds unclaimed; a run stops after
``RUN_LIMIT`` seconds whatever the caller's deadline.
"""

from __future__ import annotations

import asyncio
import math
import secrets
import socket
import statistics
import time
from dataclasses import dataclass

from grouper.common import wire

MAX_TASKS = 16
MAX_BYTES = 1 << 30
MAX_ROUNDS = 64
LISTEN_TTL = 30.0
ACCEPT_TIMEOUT = 15.0
RUN_LIMIT = 600.0

Streams = list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]


class ProbeError(ValueError):
    """A refused request: the message names the field."""


class ProbeBusy(ProbeError):
    """Another probe holds this host."""


@dataclass
class _Listening:
    socks: list[socket.socket]
    expires: float


class Prober:
    """This host's end of calibration probes, bound to its data ``address``."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._listening: dict[str, _Listening] = {}
        self._busy = asyncio.Lock()

    def listen(self, tasks: int) -> tuple[str, list[int]]:
        """Open ``tasks`` listening sockets on ephemeral ports; (token, ports)."""
        self._expire()
        if not 1 <= tasks <= MAX_TASKS:
            raise ProbeError(f"tasks: 1 to {MAX_TASKS}, got {tasks}")
        if not self.address:
            raise ProbeError("address: this host has no data address in the cluster config")
        if self._listening or self._busy.locked():
            raise ProbeBusy("probe: another calibration probe holds this host")
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        socks: list[socket.socket] = []
        try:
            for _ in range(tasks):
                s = socket.socket(family, socket.SOCK_STREAM)
                socks.append(s)
                s.setblocking(False)
                s.bind((self.address, 0))
                s.listen(1)
        except OSError:
            _close(socks)
            raise
        token = secrets.token_hex(8)
        self._listening[token] = _Listening(socks, time.monotonic() + LISTEN_TTL)
        return token, [s.getsockname()[1] for s in socks]

    async def run(
        self, token: str, peer: str, ports: list[int], size: float, rounds: int
    ) -> list[float]:
        """One probe's timed rounds (seconds each): as the listener with ``token``, or as
        the connecting end to ``peer``'s ``ports``."""
        if not (math.isfinite(size) and 2 <= size <= MAX_BYTES):
            raise ProbeError(f"bytes: 2 to {MAX_BYTES}, got {size!r}")
        if not 1 <= rounds <= MAX_ROUNDS:
            raise ProbeError(f"rounds: 1 to {MAX_ROUNDS}, got {rounds}")
        if bool(token) == bool(peer):
            raise ProbeError("token: give a token (listening end) or a peer_address, not both")
        if peer and not 1 <= len(ports) <= MAX_TASKS:
            raise ProbeError(f"peer_ports: 1 to {MAX_TASKS} ports, got {len(ports)}")
        self._expire()
        listening = self._listening.pop(token, None) if token else None
        if token and listening is None:
            raise ProbeError("token: no listening sockets under this token (expired?)")
        if self._busy.locked():
            if listening:
                _close(listening.socks)
            raise ProbeBusy("probe: another calibration probe runs on this host")
        async with self._busy:
            streams: Streams = []
            try:
                async with asyncio.timeout(RUN_LIMIT):
                    if listening:
                        await _accept(listening.socks, streams)
                    else:
                        await _connect(peer, ports, streams)
                    return await _rounds(streams, int(size) // 2, rounds)
            finally:
                if listening:
                    _close(listening.socks)
                for _, w in streams:
                    w.close()

    def close(self) -> None:
        for entry in self._listening.values():
            _close(entry.socks)
        self._listening.clear()

    def _expire(self) -> None:
        now = time.monotonic()
        for token in [t for t, e in self._listening.items() if e.expires < now]:
            _close(self._listening.pop(token).socks)


def _close(socks: list[socket.socket]) -> None:
    for s in socks:
        s.close()


async def _accept(socks: list[socket.socket], out: Streams) -> None:
    """Accept one connection on each socket into ``out`` (the caller closes what is
    there, whatever happens)."""
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(ACCEPT_TIMEOUT):
        for s in socks:
            conn, _ = await loop.sock_accept(s)
            try:
                out.append(await asyncio.open_connection(sock=conn))
            except BaseException:
                conn.close()
                raise


async def _connect(peer: str, ports: list[int], out: Streams) -> None:
    """Connect to each of ``peer``'s ports, into ``out`` (closed by the caller)."""
    async with asyncio.timeout(ACCEPT_TIMEOUT):
        for port in ports:
            out.append(await asyncio.open_connection(peer, port))


async def _rounds(streams: Streams, chunk: int, rounds: int) -> list[float]:
    """One warm-up round, then ``rounds`` timed ones; each starts when every task of
    the previous one is done here (the peer's data paces both ends)."""
    ledger = wire.Ledger()

    async def task(i: int, rnd: int, t0: float) -> float:
        r, w = streams[i]
        for step in (0, 1):
            tag = rnd * 2 + step
            await asyncio.gather(
                # flow 0 on every connection: each carries one task, and the ends
                # number their tasks differently when several hosts send (star)
                wire.send(w, 0, tag, chunk, ledger, f"{i}>"),
                wire.recv(r, 0, tag, chunk, ledger, f"{i}<"),
            )
        return time.monotonic() - t0

    out = []
    for rnd in range(rounds + 1):
        t0 = time.monotonic()
        times = await asyncio.gather(*(task(i, rnd, t0) for i in range(len(streams))))
        if rnd:
            out.append(statistics.fmean(times))
    return out
