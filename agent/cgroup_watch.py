"""inotify on the directories that hold jobs' cgroups: a job's cgroup removed (the job
ended: Slurm's step, a pod, a systemd scope) or made again under the same name (a new
id the loaded rules do not match) is known at once, without polling."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Iterable

IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_ONLYDIR = 0x100, 0x200, 0x400, 0x01000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, os.O_CLOEXEC
_EVENT = ctypes.sizeof(ctypes.c_int) + 3 * ctypes.sizeof(ctypes.c_uint32)


class CgroupWatch:
    """One inotify instance; ``fileno()`` is readable when something changed (give it
    to the event loop), ``drain()`` reads the events."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        fd = self._libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.fd = fd
        self.watched: dict[str, int] = {}  # directory -> watch descriptor

    def fileno(self) -> int:
        return self.fd

    def watch_parents(self, cgroup_dirs: Iterable[str]) -> None:
        """Watch exactly the parent directories of ``cgroup_dirs``."""
        want = {os.path.dirname(d.rstrip("/")) for d in cgroup_dirs}
        for d in set(self.watched) - want:
            self._libc.inotify_rm_watch(self.fd, self.watched.pop(d))
        mask = IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_ONLYDIR
        for d in want - set(self.watched):
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(d), mask)
            if wd >= 0:  # a parent already gone: its job's cgroup is gone too
                self.watched[d] = wd

    def drain(self) -> int:
        """Read and discard pending events; how many bytes were read (0: none)."""
        total = 0
        while True:
            try:
                chunk = os.read(self.fd, 64 * _EVENT + 4096)
            except BlockingIOError:
                return total
            if not chunk:
                return total
            total += len(chunk)

    def close(self) -> None:
        os.close(self.fd)
