"""Processes of a job: identity (pid and start time), descendants, socket inodes.

A pid alone is not an identity: after a process exits the kernel may give its pid to an
unrelated one. Every process is therefore held as (pid, start time in clock ticks since
boot, field 22 of ``/proc/<pid>/stat``); a pid whose start time changed is a stranger.
"""

from __future__ import annotations

import os
from typing import NamedTuple

PROC = "/proc"


class Proc(NamedTuple):
    pid: int
    start: int


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time) of a live process, or None."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    rest = data[data.rindex(b")") + 2 :].split()
    if rest[0] in (b"Z", b"X"):  # a zombie sends nothing and holds no sockets
        return None
    return int(rest[1]), int(rest[19])


def identify(pid: int) -> Proc | None:
    st = _stat(pid)
    return None if st is None else Proc(pid, st[1])


def alive(p: Proc) -> bool:
    st = _stat(p.pid)
    return st is not None and st[1] == p.start


def descendants(roots: dict[str, set[Proc]]) -> dict[str, set[Proc]]:
    """For each owner, its ``roots`` that still live and every live process below one of
    them. A process registered by another owner stays with that owner, with its subtree
    (a job started from inside another job's process tree is its own job)."""
    children: dict[int, list[Proc]] = {}
    for name in os.listdir(PROC):
        if not name.isdigit():
            continue
        st = _stat(int(name))
        if st is not None:
            children.setdefault(st[0], []).append(Proc(int(name), st[1]))
    claimed = {p for procs in roots.values() for p in procs}
    out: dict[str, set[Proc]] = {}
    for owner, procs in roots.items():
        mine = {r for r in procs if alive(r)}
        todo = list(mine)
        while todo:
            for child in children.get(todo.pop().pid, ()):
                if child not in mine and child not in claimed:
                    mine.add(child)
                    todo.append(child)
        out[owner] = mine
    return out


def socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets a process holds (``/proc/<pid>/fd`` links)."""
    out = set()
    base = f"{PROC}/{pid}/fd"
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for fd in names:
        try:
            target = os.readlink(f"{base}/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            out.add(int(target[8:-1]))
    return out
