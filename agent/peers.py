"""Who calls the registry: the kernel's account of every connection, never the message.

gRPC's Python server does not give a handler the peer credentials of a Unix socket, so
the agent accepts the registry's connections itself (``PeerRelay``): for each one it
reads ``SO_PEERCRED`` (the uid, gid and pid the kernel recorded at ``connect()``) and the
caller's groups, then connects to the gRPC server's own socket, which lies in a
directory only root may enter, from an address of its own naming, and relays the bytes
both ways. A servicer finds the caller by that address (``context.peer()``); a call that
did not come through the relay has no caller and is refused. The private directory is
made by ``mkdtemp`` (mode 0700, in the temporary directory: a Unix socket's path holds
at most 107 bytes, which a directory beside a deep public socket would exceed). A
symbolic link beside the public socket (its name and ``.private``) names it, so that
an agent started after one that was killed removes the directory that one left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import shutil
import socket
import stat
import struct
import tempfile
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("grouper.agent")

PRIVATE_PREFIX = "grouper-registry-"
MAX_CONNECTIONS_PER_UID = 64  # open registry connections one user may hold
CHUNK = 65536


@dataclass(frozen=True)
class Caller:
    """A local caller as the kernel knows it."""

    uid: int
    gid: int
    pid: int  # 0: not a process (a JSON-lines file, identified by its owner)
    groups: frozenset[int] = frozenset()

    @property
    def root(self) -> bool:
        return self.uid == 0

    def __str__(self) -> str:
        return f"uid {self.uid} pid {self.pid}" if self.pid else f"uid {self.uid}"


ROOT = Caller(0, 0, 0)


def groups_of(pid: int) -> frozenset[int]:
    """Supplementary groups of process ``pid`` (empty if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Groups:"):
                return frozenset(int(g) for g in line.split()[1:])
    except (OSError, ValueError):
        pass
    return frozenset()


def bind_unix(path: Path) -> socket.socket:
    """A listening Unix socket at ``path``, bound through its directory's descriptor:
    Python refuses a path of 108 bytes, which the kernel (and gRPC) take."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        sock.bind(f"/proc/self/fd/{folder}/{path.name}")
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    finally:
        os.close(folder)
    return sock


def peer_caller(sock: socket.socket) -> Caller:
    pid, uid, gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return Caller(uid, gid, pid, groups_of(pid))


class PeerRelay:
    """The public registry socket in front of the gRPC server's private one."""

    def __init__(self, public: Path) -> None:
        self.public = public
        self.private: Path | None = None  # root only (0700), made by prepare()
        self._callers: dict[str, Caller] = {}  # the relay's own address -> its caller
        self._open: dict[int, int] = {}  # uid -> open connections
        self._names = itertools.count(1)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task] = set()

    def prepare(self) -> str:
        """The private directory made (a stale public socket of a crash removed, and
        the private directory it named); the address the gRPC server listens on."""
        _remove_stale(self.mark)
        self.private = Path(tempfile.mkdtemp(prefix=PRIVATE_PREFIX))
        self.public.unlink(missing_ok=True)
        self.mark.unlink(missing_ok=True)
        self.mark.symlink_to(self.private)
        return f"unix:{self.inner}"

    @property
    def mark(self) -> Path:
        """The link to the private directory, beside the public socket."""
        return self.public.with_name(self.public.name + ".private")

    @property
    def inner(self) -> Path:
        assert self.private is not None, "prepare() first"
        return self.private / "s"

    async def start(self, mode: int, gid: int | None) -> None:
        self._server = await asyncio.start_unix_server(self._accept, sock=bind_unix(self.public))
        if gid is not None:
            os.chown(self.public, 0, gid)
        os.chmod(self.public, mode)

    def caller(self, peer: str) -> Caller | None:
        """The caller behind a gRPC peer string (``unix:PATH`` of the relay's side)."""
        return self._callers.get(peer.removeprefix("unix:"))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            caller = peer_caller(writer.get_extra_info("socket"))
            if self._open.get(caller.uid, 0) >= MAX_CONNECTIONS_PER_UID and not caller.root:
                log.warning("registry: refused a connection of %s: %d open", caller,
                            MAX_CONNECTIONS_PER_UID)  # fmt: skip
                return
            self._open[caller.uid] = self._open.get(caller.uid, 0) + 1
            try:
                await self._relay(caller, reader, writer)
            finally:
                self._open[caller.uid] -= 1
        except (OSError, ConnectionError) as exc:
            log.debug("registry connection ended: %s", exc)
        finally:
            writer.close()
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _relay(
        self, caller: Caller, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        name = str(self.inner.with_name(f"c{next(self._names)}"))
        inner = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        inner.setblocking(False)
        try:
            inner.bind(name)
            await asyncio.get_running_loop().sock_connect(inner, str(self.inner))
        except OSError:
            inner.close()
            raise
        finally:
            with contextlib.suppress(OSError):
                os.unlink(name)  # the address stays the socket's; the file is not needed
        self._callers[name] = caller
        try:
            r2, w2 = await asyncio.open_unix_connection(sock=inner)
            await asyncio.gather(_pipe(reader, w2), _pipe(r2, writer))
        finally:
            del self._callers[name]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.public.unlink(missing_ok=True)
        if self.private is not None:
            self.mark.unlink(missing_ok=True)
            shutil.rmtree(self.private, ignore_errors=True)


def _remove_stale(mark: Path) -> None:
    """The private directory a killed agent's link names removed, and the link: only
    a directory of ours (this user's, in the temporary directory, named as
    ``prepare`` names them), whatever the link says."""
    if not mark.is_symlink():
        return
    old = Path(os.readlink(mark))
    mark.unlink()
    try:
        st = old.lstat()
    except OSError:
        return
    ours = old.parent == Path(tempfile.gettempdir()) and old.name.startswith(PRIVATE_PREFIX)
    if ours and stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
        shutil.rmtree(old, ignore_errors=True)
        log.info("registry: removed %s, left by an agent that did not stop", old)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (OSError, ConnectionError):
        pass
    finally:
        writer.close()
