"""Tiny TCP sink/sender run inside namespaces by tests.

python tests/tcp_tool.py sink PORT [PORT ...]    accept on each port, read to EOF
    (port 0: the kernel picks one; "ready P1 P2 ..." names the ports listened on)
python tests/tcp_tool.py send ADDR PORT BYTES [PRIO]    connect, send BYTES, close
    (PRIO: the socket's SO_PRIORITY, as an application may set it)
"""

from __future__ import annotations

import socket
import sys
import threading


def sink(ports: list[int]) -> None:
    def serve(srv: socket.socket) -> None:
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass

    bound = []
    for p in ports:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", p))
        srv.listen(16)
        bound.append(srv.getsockname()[1])
        threading.Thread(target=serve, args=(srv,), daemon=True).start()
    print("ready", *(bound if 0 in ports else []), flush=True)
    threading.Event().wait()


def send(addr: str, port: int, size: int, priority: int | None = None) -> None:
    with socket.socket() as s:
        if priority is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, priority)
        s.settimeout(10)
        s.connect((addr, port))
        s.sendall(b"x" * size)


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink([int(p) for p in sys.argv[2:]])
    else:
        prio = int(sys.argv[5]) if len(sys.argv) > 5 else None
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), prio)
