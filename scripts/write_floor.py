"""The CPU one plan message costs the sender, per transport (issue #31).

A receiver process holds N connections; the sender writes one message of ``--bytes``
to each, ``--rounds`` times, and reports its own CPU per message (``time.process_time``,
so the receiver's work is not counted):

- ``grpc``: a stream-stream call per connection, one channel each (as the coordinator
  keeps one per agent), ``await call.write(payload)`` as ``AgentLink.post`` does;
- ``asyncio``: a TCP connection each, the payload length-prefixed and handed to
  ``transport.write`` (no await per message: the kernel's socket buffer queues it);
- ``asyncio-tls``: the same over TLS (``ssl``, a throwaway self-signed key).

    python scripts/write_floor.py --conns 1000 --rounds 5 --bytes 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import ssl
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import grpc

METHOD = "/floor.Sink/Session"


def _make_key(tmp: Path) -> None:
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", tmp / "k.pem", "-out", tmp / "c.pem", "-days", "1",
         "-subj", "/CN=localhost"],
        check=True, capture_output=True,
    )  # fmt: skip


def _tls(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """Server and client contexts on the key ``_make_key`` wrote."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "c.pem", tmp / "k.pem")
    client = ssl.create_default_context(cafile=str(tmp / "c.pem"))
    return server, client


async def _sink(kind: str, port: mp.Value, tls_dir: str) -> None:  # type: ignore[valid-type]
    if kind == "grpc":

        async def session(requests, context):  # noqa: ANN001, ANN202
            async for _ in requests:
                pass
            return
            yield  # a generator: a stream-stream handler

        server = grpc.aio.server(options=[("grpc.max_concurrent_streams", 1 << 20)])
        handler = grpc.stream_stream_rpc_method_handler(session)
        server.add_generic_rpc_handlers(
            [grpc.method_handlers_generic_handler("floor.Sink", {"Session": handler})]
        )
        port.value = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        await server.wait_for_termination()
        return

    class Drain(asyncio.Protocol):
        def data_received(self, data: bytes) -> None:
            pass

    ctx = _tls(Path(tls_dir))[0] if kind == "asyncio-tls" else None
    srv = await asyncio.get_running_loop().create_server(Drain, "127.0.0.1", 0, ssl=ctx,
                                                         backlog=4096)  # fmt: skip
    port.value = srv.sockets[0].getsockname()[1]
    await srv.serve_forever()


def _serve(kind: str, port: mp.Value, tls_dir: str) -> None:  # type: ignore[valid-type]
    asyncio.run(_sink(kind, port, tls_dir))


async def _send(kind: str, port: int, conns: int, rounds: int, size: int, tls_dir: str) -> float:
    payload = b"x" * size
    if kind == "grpc":
        chans = [grpc.aio.insecure_channel(f"127.0.0.1:{port}") for _ in range(conns)]
        calls = [ch.stream_stream(METHOD)() for ch in chans]
        for c in calls:  # the streams are open before timing
            await c.write(payload)
        t0 = time.process_time()
        for _ in range(rounds):
            for c in calls:
                await c.write(payload)
        cpu = time.process_time() - t0
        for c in calls:
            c.cancel()
        await asyncio.gather(*(ch.close() for ch in chans))
        return cpu
    loop = asyncio.get_running_loop()
    ctx = _tls(Path(tls_dir))[1] if kind == "asyncio-tls" else None
    name = "localhost" if ctx else None
    transports = []
    for _ in range(conns):
        tr, _ = await loop.create_connection(
            asyncio.Protocol, "127.0.0.1", port, ssl=ctx, server_hostname=name
        )
        transports.append(tr)
    frame = struct.pack("!I", size) + payload
    t0 = time.process_time()
    for _ in range(rounds):
        for tr in transports:
            tr.write(frame)
        await asyncio.sleep(0)  # let the loop flush what the kernel did not take at once
    cpu = time.process_time() - t0
    for tr in transports:
        tr.close()
    return cpu


def measure(kind: str, conns: int, rounds: int, size: int) -> dict:
    with tempfile.TemporaryDirectory() as tls_dir:
        if kind == "asyncio-tls":
            _make_key(Path(tls_dir))  # the key both sides load
        port = mp.Value("i", 0)
        sink = mp.Process(target=_serve, args=(kind, port, tls_dir), daemon=True)
        sink.start()
        try:
            while port.value == 0:
                time.sleep(0.05)
            cpu = asyncio.run(_send(kind, port.value, conns, rounds, size, tls_dir))
        finally:
            sink.terminate()
            sink.join(5)
    n = conns * rounds
    return {"transport": kind, "messages": n, "cpu_seconds": cpu, "us_per_message": cpu / n * 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conns", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bytes", type=int, default=2000)
    ap.add_argument("--transports", default="grpc,asyncio,asyncio-tls")
    a = ap.parse_args()
    for kind in a.transports.split(","):
        try:
            print(json.dumps(measure(kind, a.conns, a.rounds, a.bytes)), flush=True)
        except (asyncio.InvalidStateError, OSError) as exc:  # seen with grpc at 3,000
            raise SystemExit(f"write_floor: {kind} at {a.conns} connections: {exc!r}") from None


if __name__ == "__main__":
    main()
