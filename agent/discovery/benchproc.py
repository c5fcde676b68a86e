"""Processes for ``grouper bench discovery``, each run inside a namespace with
``python -m grouper.agent.discovery.benchproc MODE ...``; they talk JSON lines on stdout.

* ``jobs HOST PORT N C [CGROUPS]``: fork N job processes holding C idle connections
  each to HOST:PORT (job i first enters the cgroup directory ``CGROUPS<i>``, so its
  sockets are that cgroup's); print ``{"pids": [...]}``, then wait for stdin to close.
* ``churn HOST PORT RATE``: open, write 1 KiB to and close RATE connections a second
  until stdin closes.
* ``probe HOST PORT``: for every line on stdin, open a new connection (a job that
  reconnects), note the time just before ``connect()``, then send a 200-byte message
  every millisecond for ``SEND_FOR`` seconds; print ``{"sport": S, "t0": T}``.
* ``sink PORT NIC DSCP``: accept and discard on PORT; capture on NIC and print
  ``{"sport": S, "t": T, "late": L}`` for the first data packet of each source port that
  carries DSCP, L being the packets of that connection (its SYN included) that arrived
  before it with DSCP 0, i.e. before the agent had classified the connection.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import struct
import sys
import threading
import time

SEND_FOR = 0.6
ETH_P_IP = 0x0800


def _say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG: the kernel sends SIGKILL when the parent exits, however it ends."""
    import ctypes

    ctypes.CDLL("libc.so.6").prctl(1, signal.SIGKILL)


def jobs(host: str, port: int, n: int, c: int, cgroups: str = "") -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # so ``finally`` ends the children
    pids = []
    for i in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            _die_with_parent()
            os.close(r)
            if cgroups:
                with open(f"{cgroups}{i}/cgroup.procs", "w") as fh:
                    fh.write(str(os.getpid()))
            conns = [socket.create_connection((host, port)) for _ in range(c)]
            os.write(w, b"x")
            os.close(w)
            signal.pause()  # hold the connections until killed
            del conns
            os._exit(0)
        os.close(w)
        os.read(r, 1)  # the child's connections are up
        os.close(r)
        pids.append(pid)
    _say({"pids": pids})
    try:
        sys.stdin.read()
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        for pid in pids:
            os.waitpid(pid, 0)


def probe(host: str, port: int) -> None:
    msg = b"p" * 200
    for _line in sys.stdin:
        s = socket.socket()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.time()
        s.connect((host, port))
        sport = s.getsockname()[1]
        end = time.monotonic() + SEND_FOR
        while time.monotonic() < end:
            s.send(msg)
            time.sleep(0.001)
        s.close()
        _say({"sport": sport, "t0": t0})


def churn(host: str, port: int, rate: float) -> None:
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    payload, next_at = b"c" * 1024, time.monotonic()
    while not stop.is_set():
        with socket.create_connection((host, port)) as s:
            s.sendall(payload)
        next_at += 1.0 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))


def sink(port: int, nic: str, dscp: int) -> None:
    threading.Thread(target=_capture, args=(nic, dscp), daemon=True).start()
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(4096)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            if key.fileobj is srv:
                conn, _ = srv.accept()
                conn.setblocking(False)
                sel.register(conn, selectors.EVENT_READ)
                continue
            conn = key.fileobj
            try:
                data = conn.recv(65536)  # type: ignore[union-attr]
            except OSError:
                data = b""
            if not data:
                sel.unregister(conn)
                conn.close()  # type: ignore[union-attr]


def _capture(nic: str, dscp: int) -> None:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_IP))
    s.bind((nic, ETH_P_IP))
    seen: set[int] = set()
    early: dict[int, int] = {}  # DSCP-0 packets of a connection not yet marked
    while True:
        pkt = s.recv(128)
        t = time.time()
        if len(pkt) < 40 or pkt[9] != socket.IPPROTO_TCP:
            continue
        ihl = (pkt[0] & 0x0F) * 4
        total = struct.unpack_from("!H", pkt, 2)[0]
        sport = struct.unpack_from("!H", pkt, ihl)[0]
        doff = (pkt[ihl + 12] >> 4) * 4
        if sport in seen:
            continue
        if pkt[1] >> 2 == 0:
            early[sport] = early.get(sport, 0) + 1
        if total - ihl - doff <= 0 or pkt[1] >> 2 != dscp:
            continue
        seen.add(sport)
        _say({"sport": sport, "t": t, "late": early.pop(sport, 0)})


def main() -> None:
    mode, *args = sys.argv[1:]
    if mode == "jobs":
        jobs(args[0], int(args[1]), int(args[2]), int(args[3]), *args[4:5])
    elif mode == "churn":
        churn(args[0], int(args[1]), float(args[2]))
    elif mode == "probe":
        probe(args[0], int(args[1]))
    elif mode == "sink":
        sink(int(args[0]), args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
