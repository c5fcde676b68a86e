"""Tiny TCP sink/sender run inside namespaces by tests.

python tests/tcp_tool.py sink PORT [PORT ...]    accept on each port, read to EOF
    (port 0: the kernel picks one; "ready P1 P2 ..." names the ports listened on)
python tests/tcp_tool.py send ADDR PORT BYTES [--priority N] [--tos N]
    connect, send BYTES, close (the socket's SO_PRIORITY and IP_TOS, as an
    application may set them)
"""

from __future__ import annotations

import argparse
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


def send(addr: str, port: int, size: int, priority: int | None, tos: int | None) -> None:
    with socket.socket() as s:
        if tos is not None:  # before SO_PRIORITY: setting IP_TOS resets the priority
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
        if priority is not None:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY, priority)
        s.settimeout(10)
        s.connect((addr, port))
        s.sendall(b"x" * size)


if __name__ == "__main__":
    if sys.argv[1] == "sink":
        sink([int(p) for p in sys.argv[2:]])
    else:
        p = argparse.ArgumentParser()
        p.add_argument("addr")
        p.add_argument("port", type=int)
        p.add_argument("size", type=int)
        p.add_argument("--priority", type=int)
        p.add_argument("--tos", type=int)
        a = p.parse_args(sys.argv[2:])
        send(a.addr, a.port, a.size, a.priority, a.tos)
