"""Tiny TCP sink/sender run inside namespaces by tests.

python tests/tcp_tool.py sink PORT [PORT ...]    accept on each port, read to EOF
python tests/tcp_tool.py send ADDR PORT BYTES    connect, send BYTES, close
"""

from __future__ import annotations

import socket
import sys
import threading


def sink(ports: list[int]) -> None:
    def serve(port: int) -> None:
        srv = socket.socket()
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind(("0.0.0.0", port))
        srv.listen(16)
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=drain, args=(conn,), daemon=True).start()

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):
                pass

    for p in ports:
        threading.Thread(target=serve, args=(p,), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


def send(addr: str, port: int, size: int) -> None:
    with socket.create_connection((addr, port), timeout=10) as s:
        s.sendall(b"x" * size)


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink([int(p) for p in sys.argv[2:]])
    else:
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
