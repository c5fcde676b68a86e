"""Messages on a connection: a header and a payload that the receiver verifies.

Every message carries (flow number, iteration, length) and a payload of a known
pattern; the receiver checks all three and every payload byte, and counts bytes per
flow, so "every byte sent arrived" is checked, not assumed.
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field

HEADER = struct.Struct("!IIQ")
PATTERN = bytes(range(251)) * (1 << 14)  # ~4 MB of a pattern with no short period
CHUNK = 1 << 20


class WireError(RuntimeError):
    pass


@dataclass
class Ledger:
    sent: dict[str, int] = field(default_factory=dict)
    received: dict[str, int] = field(default_factory=dict)

    def shortfall(self) -> dict[str, int]:
        return {
            f: n - self.received.get(f, 0)
            for f, n in self.sent.items()
            if self.received.get(f, 0) != n
        }


async def send(
    writer: asyncio.StreamWriter, flow: int, iteration: int, size: int, ledger: Ledger, name: str
) -> None:
    writer.write(HEADER.pack(flow, iteration, size))
    left = size
    while left:
        n = min(left, CHUNK, len(PATTERN))
        writer.write(PATTERN[:n])
        left -= n
        await writer.drain()
    await writer.drain()
    ledger.sent[name] = ledger.sent.get(name, 0) + size


async def recv(
    reader: asyncio.StreamReader, flow: int, iteration: int, size: int, ledger: Ledger, name: str
) -> None:
    got_flow, got_iter, got_size = HEADER.unpack(await reader.readexactly(HEADER.size))
    if (got_flow, got_iter, got_size) != (flow, iteration, size):
        raise WireError(
            f"{name}: expected flow {flow} iteration {iteration} size {size}, "
            f"got {got_flow} {got_iter} {got_size}"
        )
    left = size
    while left:
        n = min(left, CHUNK, len(PATTERN))
        data = await reader.readexactly(n)
        if data != PATTERN[:n]:
            raise WireError(f"{name}: corrupted payload in iteration {iteration}")
        left -= n
    ledger.received[name] = ledger.received.get(name, 0) + size
