"""Sockets inside another network namespace, for an asyncio program outside it.

A socket belongs to the namespace it was created in, whatever thread uses it later.
Each :class:`NetnsThread` enters one namespace (``setns``) and creates sockets there on
request; the event loop then drives them like any other socket.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from queue import Queue
from typing import Any

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL("libc.so.6", use_errno=True)


class NetnsThread:
    def __init__(self, path: str) -> None:
        self.path = path
        self._jobs: Queue[tuple[Callable[..., Any], tuple, Future] | None] = Queue()
        ready: Future = Future()
        self._thread = threading.Thread(
            target=self._main, args=(ready,), daemon=True, name=f"netns:{path}"
        )
        self._thread.start()
        ready.result(timeout=10)

    def _main(self, ready: Future) -> None:
        try:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    err = ctypes.get_errno()
                    raise OSError(err, f"setns({self.path}): {os.strerror(err)}")
            finally:
                os.close(fd)
        except BaseException as exc:
            ready.set_exception(exc)
            return
        ready.set_result(None)
        while (job := self._jobs.get()) is not None:
            fn, args, fut = job
            try:
                fut.set_result(fn(*args))
            except BaseException as exc:
                fut.set_exception(exc)

    async def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        fut: Future = Future()
        self._jobs.put((fn, args, fut))
        return await asyncio.wrap_future(fut)

    async def listen(self, addr: str, port: int) -> socket.socket:
        def make() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((addr, port))
            s.listen(64)
            s.setblocking(False)
            return s

        return await self.call(make)

    async def connect(self, addr: str, port: int) -> socket.socket:
        def make() -> socket.socket:
            s = socket.create_connection((addr, port), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.setblocking(False)
            return s

        return await self.call(make)

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)
