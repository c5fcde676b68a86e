"""TCP's own loss counters per emulated host, read from the kernel after a run.

Each emulated host is a fresh network namespace, so its counters start at zero with the
run. ``/proc/PID/net/{snmp,netstat}`` of a process in that namespace (the Mininet
host's shell) are the namespace's counters: no tool or namespace switch is needed.
These are what the fluid simulator cannot see (docs/explanation/emulation.md): segments sent again,
retransmission timeouts (each a stall of at least the route's RTO floor: 10 ms on the
emulated hosts, ``topologies.leafspine.RTO_MIN``, 200 ms by Linux's default) and fast
retransmits.
"""

from __future__ import annotations

from pathlib import Path

# (file, table, counter) -> the name we report
COUNTERS = {
    ("snmp", "Tcp", "OutSegs"): "segments_sent",
    ("snmp", "Tcp", "RetransSegs"): "segments_retransmitted",
    ("netstat", "TcpExt", "TCPTimeouts"): "timeouts",
    ("netstat", "TcpExt", "TCPFastRetrans"): "fast_retransmits",
    ("netstat", "TcpExt", "TCPLostRetransmit"): "retransmits_lost",
}


def parse_tables(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp`` or ``netstat`` text -> table -> counter -> value (each table is
    a line of names followed by a line of values, both prefixed ``Table:``)."""
    lines = [ln.split() for ln in text.splitlines() if ln.strip()]
    out: dict[str, dict[str, int]] = {}
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if not names or names[0] != values[0] or len(names) != len(values):
            raise ValueError(f"unexpected counter table line: {' '.join(names[:3])} ...")
        out[names[0].rstrip(":")] = {
            n: int(v) for n, v in zip(names[1:], values[1:], strict=True) if v.lstrip("-").isdigit()
        }
    return out


def host_counters(pid: int, proc: Path = Path("/proc")) -> dict[str, int]:
    """The counters of ``COUNTERS`` for the network namespace of process ``pid``."""
    net = proc / str(pid) / "net"
    tables = {f: parse_tables((net / f).read_text()) for f in ("snmp", "netstat")}
    return {
        name: tables[f].get(table, {}).get(counter, 0)
        for (f, table, counter), name in COUNTERS.items()
    }


def total(per_host: dict[str, dict[str, int]]) -> dict[str, int]:
    """Counters summed over hosts."""
    out = dict.fromkeys(COUNTERS.values(), 0)
    for counters in per_host.values():
        for k, v in counters.items():
            out[k] += v
    return out
