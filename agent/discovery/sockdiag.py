"""TCP sockets of this network namespace, from netlink socket diagnostics.

A dump walks the kernel's whole table of established TCP sockets (262,144 buckets on a
24 GB host, shared by every namespace) whatever it returns, and a request by family
(``SOCK_DIAG_BY_FAMILY``, pyroute2's ``inet_diag_req``) lists one family per walk. The
older request (``TCPDIAG_GETSOCK``, struct ``inet_diag_req``), which every kernel
still serves, lists IPv4 and IPv6 sockets in one walk; it is used, and the request by
family kept for a kernel that refuses it. Replies are parsed here with ``struct`` on
the fixed ``inet_diag_msg`` header (and, when asked, the ``tcp_info`` attribute's
``bytes_acked``): pyroute2's generic parser costs about 116 us per socket here, which
at a 100 ms refresh and 1,600 sockets is twice a core; reading the fixed fields costs
about 1 us.
"""

from __future__ import annotations

import errno
import socket
import struct
from typing import NamedTuple

from pyroute2.netlink import NLM_F_DUMP, NLM_F_REQUEST
from pyroute2.netlink.diag import NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, inet_diag_req

NLMSG_ERROR, NLMSG_DONE = 2, 3
TCPDIAG_GETSOCK = 18  # the request that lists both families in one walk
INET_DIAG_INFO = 2  # attribute type (and bit 1 of idiag_ext) of struct tcp_info
INET_DIAG_CGROUP_ID = 21  # attribute: the socket's cgroup v2 id (Linux >= 5.7, always sent)
TCPI_BYTES_ACKED = 120  # offset of tcpi_bytes_acked in struct tcp_info (Linux >= 4.1)
# states we care about: a connection sending (ESTABLISHED) or about to (SYN_SENT, SYN_RECV)
STATES = (1 << 1) | (1 << 2) | (1 << 3)
_HDR = struct.Struct("=IHHII")  # nlmsghdr
_HDR2 = struct.Struct("=IH")  # its length and type
_MSG = struct.Struct("=BBBB2s2s16s16sI8sIIIII")  # inet_diag_msg
_REQ_BOTH = struct.Struct("=IHHIIBBBB48sII")  # nlmsghdr + inet_diag_req (one walk)


class DumpRefused(OSError):
    """The kernel answered a dump request with an error message (and nothing else)."""


class TcpSocket(NamedTuple):
    cookie: bytes  # the kernel's id for the socket: never reused while it lives
    inode: int
    family: int
    saddr: str
    sport: int
    daddr: str
    dport: int
    bytes_acked: int  # -1 unless the dump asked for tcp_info
    cgroup_id: int = 0  # the cgroup v2 id of the socket's owner (0: not reported)


class SockDiag:
    """One netlink socket; ``dump()`` lists TCP sockets (IPv4 and IPv6)."""

    def __init__(self) -> None:
        self.sock = _netlink_socket()
        self.seq = 0
        self._templates: dict[tuple[int, bool], bytearray] = {}
        self.one_walk = True  # False once the kernel refused TCPDIAG_GETSOCK

    def _request_both(self, info: bool) -> bytes:
        """The request listing IPv4 and IPv6 sockets in one walk."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        ext = (1 << (INET_DIAG_INFO - 1)) if info else 0
        flags = NLM_F_REQUEST | NLM_F_DUMP
        return _REQ_BOTH.pack(
            _REQ_BOTH.size, TCPDIAG_GETSOCK, flags, self.seq, 0, 0, 0, 0, ext, b"", STATES, 0
        )

    def _request(self, family: int, info: bool) -> bytes:
        """The encoded request (pyroute2 encodes it once; later ones only change seq)."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        tpl = self._templates.get((family, info))
        if tpl is None:
            tpl = self._templates[family, info] = bytearray(self._encode(family, info))
        struct.pack_into("=I", tpl, 8, self.seq)
        return bytes(tpl)

    def _encode(self, family: int, info: bool) -> bytes:
        msg = inet_diag_req()
        msg["header"]["type"] = SOCK_DIAG_BY_FAMILY
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        msg["sdiag_family"] = family
        msg["sdiag_protocol"] = socket.IPPROTO_TCP
        msg["idiag_ext"] = (1 << (INET_DIAG_INFO - 1)) if info else 0
        msg["idiag_states"] = STATES
        msg.encode()
        return bytes(msg.data)

    def dump(self, *, info: bool = False) -> list[TcpSocket]:
        """Every TCP socket of the namespace in the states above."""
        out: list[TcpSocket] = []
        self.scan(None, out, info=info)
        return out

    def scan(
        self, known: dict[bytes, object] | None, new: list[TcpSocket], *, info: bool = False
    ) -> dict[bytes, int]:
        """Cookies of all sockets -> bytes acked (-1 without ``info``). Sockets whose
        cookie is not in ``known`` are appended to ``new`` in full; known ones cost
        one dict lookup (a steady host re-reads hundreds of sockets every refresh).
        A dump that fails leaves a fresh netlink socket behind (the kernel would go on
        with the failed one's dump and refuse the next request as busy)."""
        alive: dict[bytes, int] = {}
        try:
            if self.one_walk:
                self.sock.send(self._request_both(info))
                try:
                    self._read(TCPDIAG_GETSOCK, info, known, alive, new)
                    return alive
                except DumpRefused as exc:
                    if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP):
                        raise
                    self.one_walk = False  # a kernel without the older request: one walk
                    alive.clear()  # per family (its one error message read: nothing left)
                    new.clear()
            for family in (socket.AF_INET, socket.AF_INET6):
                self.sock.send(self._request(family, info))
                self._read(SOCK_DIAG_BY_FAMILY, info, known, alive, new)
            return alive
        except BaseException:
            self.sock.close()
            self.sock = _netlink_socket()
            raise

    def _read(
        self,
        reply: int,
        info: bool,
        known: dict[bytes, object] | None,
        alive: dict[bytes, int],
        new: list[TcpSocket],
    ) -> None:
        """Read the answer to the request just sent: messages of type ``reply``."""
        body = _HDR.size
        head = _HDR2.unpack_from
        c0, c1 = body + 44, body + 52  # idiag_cookie within a message
        while True:
            data = self.sock.recv(1 << 20)
            off, end = 0, len(data) - body
            # one request at a time on this socket, so every message answers it
            while off <= end:
                length, kind = head(data, off)
                if length < body:
                    raise OSError("sock_diag: a truncated reply")
                if kind == reply:
                    cookie = data[off + c0 : off + c1]
                    acked = _bytes_acked(data, off, length) if info else -1
                    alive[cookie] = acked
                    if known is None or cookie not in known:
                        s = _parse(data, off + body, cookie, acked)
                        new.append(s._replace(cgroup_id=_cgroup_id(data, off, length)))
                elif kind in (NLMSG_DONE, NLMSG_ERROR):
                    err = struct.unpack_from("=i", data, off + body)[0] if length >= body + 4 else 0
                    if err and kind == NLMSG_ERROR:
                        raise DumpRefused(-err, "sock_diag dump refused")
                    if err:  # the dump stopped short: what was read is not the table
                        raise OSError(-err, "sock_diag dump failed")
                    return
                off += (length + 3) & ~3

    def close(self) -> None:
        self.sock.close()


def _netlink_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG)
    sock.bind((0, 0))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    return sock


def _parse(data: bytes, pos: int, cookie: bytes, acked: int) -> TcpSocket:
    f = _MSG.unpack_from(data, pos)
    family = f[0]
    alen = 4 if family == socket.AF_INET else 16
    return TcpSocket(
        cookie,
        f[14],
        family,
        socket.inet_ntop(family, f[6][:alen]),
        int.from_bytes(f[4], "big"),
        socket.inet_ntop(family, f[7][:alen]),
        int.from_bytes(f[5], "big"),
        acked,
    )


def _attribute(data: bytes, off: int, length: int, kind: int, size: int) -> int | None:
    """Offset of the payload of the message's attribute ``kind`` (at least ``size``
    bytes), or None."""
    pos, end = off + _HDR.size + _MSG.size, off + length
    while pos + 4 <= end:
        alen, atype = struct.unpack_from("=HH", data, pos)
        if alen < 4:
            break
        if atype == kind and alen - 4 >= size:
            return pos + 4
        pos += (alen + 3) & ~3
    return None


def _bytes_acked(data: bytes, off: int, length: int) -> int:
    """``tcpi_bytes_acked`` from the message's INET_DIAG_INFO attribute, or 0."""
    at = _attribute(data, off, length, INET_DIAG_INFO, TCPI_BYTES_ACKED + 8)
    return 0 if at is None else struct.unpack_from("=Q", data, at + TCPI_BYTES_ACKED)[0]


def _cgroup_id(data: bytes, off: int, length: int) -> int:
    at = _attribute(data, off, length, INET_DIAG_CGROUP_ID, 8)
    return 0 if at is None else struct.unpack_from("=Q", data, at)[0]


def _tcp_mib(path: str, names: tuple[bytes, ...]) -> int | None:
    """The sum of the namespace's TCP counters ``names`` (``/proc/net/snmp``), or None
    where they cannot be read."""
    try:
        with open(path, "rb") as fh:
            lines = [line.split() for line in fh if line.startswith(b"Tcp:")]
        head, values = lines[0], lines[1]
        return sum(int(values[head.index(name)]) for name in names)
    except (OSError, IndexError, ValueError):
        return None


def tcp_opens(path: str = "/proc/net/snmp") -> int | None:
    """Connections this network namespace has opened, actively and passively (the
    kernel's ``ActiveOpens + PassiveOpens``), or None where they cannot be read: every
    socket a dump lists in the states above was counted there first."""
    return _tcp_mib(path, (b"ActiveOpens", b"PassiveOpens"))


def tcp_segments(path: str = "/proc/net/snmp") -> int | None:
    """TCP segments this network namespace has received, sent and sent again
    (``InSegs + OutSegs + RetransSegs``; OutSegs leaves retransmissions out), or None
    where they cannot be read: a socket's bytes acked grow only when a segment
    arrives, and a connection closes with one in or out, or after retransmissions
    that went unanswered."""
    return _tcp_mib(path, (b"InSegs", b"OutSegs", b"RetransSegs"))
