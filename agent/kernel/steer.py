"""The BPF classifier that steers our priorities into a per-TX-queue band qdisc.

nftables marks a packet with ``skb->priority = 4752:<minor>``. Under a multi-queue root
each TX queue has its own band qdisc ``child:``, which only reads classids of its own
major. This program, attached as a ``cls_bpf`` filter to that qdisc, returns
``child:<minor>`` for packets whose priority has our major and 0 ("no match": the
qdisc's default band) for every other packet, so other applications' ``SO_PRIORITY``
values are never mapped into our bands. Nine instructions, no maps, no helpers.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
from functools import cache

from pyroute2 import IPRoute

from grouper.agent.kernel.layout import HANDLE_MAJOR

FILTER_NAME = "grouper-steer"
_BPF_PROG_LOAD = 5
_PROG_TYPE_SCHED_CLS = 3
_SKB_PRIORITY = 32  # offsetof(struct __sk_buff, priority)
_NR_BPF = {"x86_64": 321, "aarch64": 280, "ppc64le": 361, "s390x": 351}
_ETH_P_ALL = 0x0003


class SteerError(OSError):
    pass


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(child: int) -> bytes:
    """eBPF for one child qdisc: ``4752:m -> child:m``, anything else -> 0 (no match)."""
    return b"".join(
        [
            _insn(0x61, 0, 1, _SKB_PRIORITY),  # r0 = skb->priority
            _insn(0xBF, 2, 0),  # r2 = r0
            _insn(0x77, 2, imm=16),  # r2 >>= 16
            _insn(0x55, 2, off=3, imm=HANDLE_MAJOR),  # if r2 != ours: goto other
            _insn(0x57, 0, imm=0xFFFF),  # r0 &= 0xffff
            _insn(0x47, 0, imm=child << 16),  # r0 |= child << 16
            _insn(0x95),  # return r0
            _insn(0xB7, 0, imm=0),  # other: r0 = 0
            _insn(0x95),  # return 0
        ]
    )


def load(child: int) -> int:
    """Load the program for ``child`` into the kernel; returns its file descriptor."""
    nr = _NR_BPF.get(platform.machine())
    if nr is None:
        raise SteerError(0, f"no bpf syscall number known for {platform.machine()}")
    code = program(child)
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    log_buf = ctypes.create_string_buffer(4096)
    attr = struct.pack(
        "<IIQQIIQII16s",
        _PROG_TYPE_SCHED_CLS,
        len(code) // 8,
        ctypes.addressof(insns),
        ctypes.addressof(license_),
        1,  # log level: the verifier says why if it refuses
        len(log_buf),
        ctypes.addressof(log_buf),
        0,
        0,
        b"grouper_steer",
    )
    buf = ctypes.create_string_buffer(attr, 128)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.syscall(nr, _BPF_PROG_LOAD, buf, len(buf))
    if fd < 0:
        err = ctypes.get_errno()
        raise SteerError(err, f"bpf prog load: {os.strerror(err)} {log_buf.value.decode()[:200]}")
    return fd


def attach(ipr: IPRoute, index: int, child: int) -> None:
    """Attach the steering filter to band qdisc ``child:`` (the kernel keeps the program)."""
    fd = load(child)
    try:
        ipr.tc(
            "add-filter",
            "bpf",
            index=index,
            handle=0,
            parent=child << 16,
            fd=fd,
            name=FILTER_NAME,
            prio=1,
            protocol=_ETH_P_ALL,
        )
    finally:
        os.close(fd)


def attached(ipr: IPRoute, index: int, child: int) -> bool:
    """Whether band qdisc ``child:`` has our steering filter."""
    for f in ipr.get_filters(index=index, parent=child << 16):
        opts = f.get_attr("TCA_OPTIONS")
        if f.get_attr("TCA_KIND") == "bpf" and opts is not None:
            if opts.get_attr("TCA_BPF_NAME") == FILTER_NAME:
                return True
    return False


@cache
def available() -> bool:
    """Whether this kernel and machine can load the program (no side effects left)."""
    try:
        os.close(load(HANDLE_MAJOR + 1))
    except SteerError:
        return False
    return True
