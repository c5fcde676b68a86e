"""Connections of registered jobs, found from their processes (pure logic + three probes).

A refresh dumps the namespace's TCP sockets (``sockdiag``), unless nothing a dump would
find can have changed: no connection opened in the namespace since the last dump (the
kernel's count of active and passive opens, ``opens``, read before and after each dump:
an open counted during one makes the next refresh dump again), none waiting for its
owner, no job registered or joined since, and, for a refresh that reads bytes, no TCP
segment received, sent or sent again in the namespace since the last one did
(``segments``, read before it: bytes are acked only with a segment, and connections
close with one or after unanswered retransmissions). Every tenth refresh that reads
bytes dumps whatever the counts say, for what they do not show (a connection aborted
in SYN-SENT sends nothing; an ACK is counted just before its socket takes it; a
passive open's child is counted before it is in the table): ten seconds at most. A
dump walks the kernel's whole table of established sockets, so a steady host skips it.

Sockets seen before cost a dict lookup; a socket toward a cluster host that is new is
matched to a job by its inode, scanning the job's processes (and their descendants)
only then. Sockets that belong to no job are remembered as foreign until they close or
a job registers. A connection the kernel has established but no process has accept()ed
yet has inode 0: it has no owner *yet*, so it is looked at again at every refresh until
it has one (a late accept() is then classified, not lost).

Per connection the tracker keeps the rule key the kernel matches packets by (the
connection's addresses and ports) and, from dumps with ``tcp_info``, the bytes acked,
which the load estimator turns into bytes per iteration.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from grouper.agent.discovery import procs as P
from grouper.agent.discovery.sockdiag import TcpSocket

JobKey = tuple[str, str]
QUIET_READS = 9  # refreshes with bytes skipped in a row at most (the 10th dumps)


class Diag(Protocol):
    def scan(
        self, known: dict[bytes, Any] | None, new: list[TcpSocket], *, info: bool = False
    ) -> dict[bytes, int]: ...


@dataclass
class Conn:
    job: JobKey
    dst_host: str
    key: tuple  # ("conn" | "conn6", saddr, daddr, sport, dport)
    acked: int = 0  # bytes acked when last read (a new connection starts at 0)


def conn_key(s: TcpSocket) -> tuple:
    if s.family == socket.AF_INET:
        return ("conn", s.saddr, s.daddr, s.sport, s.dport)
    if s.daddr.startswith("::ffff:") and "." in s.daddr:  # a dual-stack socket speaking IPv4
        return ("conn", s.saddr.removeprefix("::ffff:"), s.daddr[7:], s.sport, s.dport)
    return ("conn6", s.saddr, s.daddr, s.sport, s.dport)


def dst_address(s: TcpSocket) -> str:
    return s.daddr[7:] if s.daddr.startswith("::ffff:") and "." in s.daddr else s.daddr


@dataclass
class Tracker:
    host: str
    host_of: dict[str, str]  # cluster address -> host name (IPv4 and IPv6 text form)
    diag: Diag
    descendants: Callable[[dict[JobKey, set[P.Proc]]], dict[JobKey, set[P.Proc]]] = P.descendants
    socket_inodes: Callable[[int], set[int]] = P.socket_inodes
    opens: Callable[[], int | None] = lambda: None  # connections opened here (None: unknown)
    segments: Callable[[], int | None] = lambda: None  # TCP segments in and out here
    conns: dict[bytes, Conn] = field(default_factory=dict)
    foreign: dict[bytes, None] = field(default_factory=dict)
    sent: dict[tuple[JobKey, str, tuple], int] = field(default_factory=dict)  # since take_sent
    scans: int = 0  # process scans done (each costs a /proc walk)
    last_new: dict[JobKey, int] = field(default_factory=dict)  # scan that last found one
    by_cgroup: dict[int, JobKey] = field(default_factory=dict)  # jobs known by cgroup
    unknown_cgroup: bool = False  # a new socket in a cgroup not in by_cgroup was seen
    dumps: int = 0  # refreshes that dumped the sockets
    stale: bool = True  # sockets seen before may be judged otherwise now: dump
    waiting: bool = False  # the last dump saw a connection not accept()ed yet
    opened: int | None = None  # ``opens()`` at the last dump (None: dump next time)
    counted: int | None = None  # ``segments()`` before the last dump with bytes
    unread: int = 0  # refreshes with bytes skipped since that dump

    def forget_foreign(self) -> None:
        """A job registered: sockets that belonged to nobody may now be its own."""
        self.foreign.clear()
        self.stale = True

    def refresh(self, jobs: dict[JobKey, set[P.Proc]], *, info: bool = False) -> set[JobKey]:
        """One dump, where one can find something (above); returns the jobs whose set
        of connections changed. ``jobs`` maps each job to its known processes;
        descendants found are added to it in place."""
        opened = self.opens()
        segments = self.segments() if info else None
        quiet = opened is not None and opened == self.opened
        if quiet and not (self.stale or self.waiting):
            if not info:
                return set()  # nothing opened
            if segments is not None and segments == self.counted and self.unread < QUIET_READS:
                self.unread += 1  # no segment in or out since bytes were read
                return set()
        self.dumps += 1
        known: dict[bytes, Any] = self.conns | self.foreign if self.foreign else self.conns
        new: list[TcpSocket] = []
        alive = self.diag.scan(known, new, info=info)
        if self.opens() != opened:  # one opened during the dump, perhaps behind it
            opened = None  # so the next refresh dumps again
        changed = set()
        for cookie in [c for c in self.conns if c not in alive]:
            changed.add(self.conns.pop(cookie).job)
        for cookie in [c for c in self.foreign if c not in alive]:
            del self.foreign[cookie]
        if info:
            for cookie, conn in self.conns.items():
                acked = alive[cookie]
                if acked > conn.acked:
                    k = (conn.job, conn.dst_host, conn.key)
                    self.sent[k] = self.sent.get(k, 0) + acked - conn.acked
                    conn.acked = acked
        ours, waiting = [], False
        for s in new:
            if self.host_of.get(dst_address(s), self.host) == self.host:
                self.foreign[s.cookie] = None  # not toward another cluster host: never ours
                continue
            job = self.by_cgroup.get(s.cgroup_id) if self.by_cgroup else None
            if job is not None:  # a job known by its cgroup: no fd table to read
                self._add(s, job, changed)
                continue
            if self.by_cgroup:  # perhaps a cgroup made below a job's since the last walk
                self.unknown_cgroup = True
            if s.inode:
                ours.append(s)
            else:  # established but not yet accept()ed, so no process holds it yet. Not
                waiting = True  # foreign, just not known: new again next refresh
        owner = self._owners(jobs, {s.inode for s in ours}) if ours and jobs else {}
        for s in ours:
            job = owner.get(s.inode)
            if job is None:
                self.foreign[s.cookie] = None
            else:
                self._add(s, job, changed)
        # only now that the dump was read: a refresh that failed leaves its reasons
        self.stale, self.waiting, self.opened = False, waiting, opened
        if info:
            self.counted, self.unread = segments, 0
        return changed

    def set_cgroups(self, by_cgroup: dict[int, JobKey]) -> None:
        """Cgroup ids (a job's cgroup and those below it) -> job. Sockets written off
        as nobody's may be in a cgroup that is new here: they are looked at again."""
        self.unknown_cgroup = False
        if by_cgroup != self.by_cgroup:
            self.by_cgroup = dict(by_cgroup)
            self.foreign.clear()
            self.stale = True

    def _add(self, s: TcpSocket, job: JobKey, changed: set[JobKey]) -> None:
        dst = self.host_of[dst_address(s)]
        self.conns[s.cookie] = Conn(job, dst, conn_key(s), max(s.bytes_acked, 0))
        if s.bytes_acked > 0:
            k = (job, dst, conn_key(s))
            self.sent[k] = self.sent.get(k, 0) + s.bytes_acked
        changed.add(job)
        self.last_new[job] = self.scans

    def _owners(self, jobs: dict[JobKey, set[P.Proc]], wanted: set[int]) -> dict[int, JobKey]:
        """Owner job of each inode in ``wanted``; stops reading fd tables once all are
        found (jobs that gained connections most recently are read first)."""
        self.scans += 1
        found = self.descendants(jobs)
        owner: dict[int, JobKey] = {}
        left = set(wanted)
        for job in sorted(found, key=lambda j: -self.last_new.get(j, 0)):
            jobs[job].update(found[job])
            for p in found[job]:
                if not left:
                    break
                hits = self.socket_inodes(p.pid) & left
                for inode in hits:
                    owner[inode] = job
                left -= hits
        return owner

    def connections(self) -> dict[tuple[JobKey, str], list[tuple]]:
        """(job, destination host) -> rule keys of its open connections."""
        out: dict[tuple[JobKey, str], list[tuple]] = {}
        for c in self.conns.values():
            out.setdefault((c.job, c.dst_host), []).append(c.key)
        return out

    def take_sent(self) -> dict[tuple[JobKey, str, tuple], int]:
        """Bytes acked per (job, destination host, connection key) since the last call."""
        out, self.sent = self.sent, {}
        return out

    def drop_job(self, job: JobKey) -> None:
        self.last_new.pop(job, None)
        for cookie in [c for c, conn in self.conns.items() if conn.job == job]:
            self.foreign[cookie] = None  # its sockets, if any linger, are nobody's now
            del self.conns[cookie]
