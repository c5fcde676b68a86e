"""Each TCP connection of an emulated run: its TCP state over the run and its path.

A ``ConnectionSampler`` reads ``ss -tin`` in every emulated host once a second (the
congestion control, RTT, cwnd, pacing and delivery rates, retransmissions) and asks the
sender's leaf which spine the fabric's ECMP hash gives the connection (``ip route get``
with the connection's ports: the same 5-tuple hash the leaf forwards with). Which
connections share a spine decides as much of a run as the policy does, so every run's
results name each connection's path.
"""

from __future__ import annotations

import ipaddress
import re
import subprocess
import threading
from typing import Any

from grouper.topologies.leafspine import Fabric

FIELDS = {  # ss -i field -> (our name, scale to our unit)
    "rtt": ("rtt_ms", 1.0),
    "cwnd": ("cwnd", 1.0),
    "pacing_rate": ("pacing_mbps", 1e-6),
    "delivery_rate": ("delivery_mbps", 1e-6),
}
RATE = re.compile(r"^([\d.]+)([KMG]?)bps$")
UNITS = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9}


def _rate(text: str) -> float | None:
    m = RATE.match(text)
    return float(m[1]) * UNITS[m[2]] if m else None


def parse_ss(text: str, congestion: tuple[str, ...]) -> list[dict[str, Any]]:
    """``ss -tinH`` output -> one dict per connection: src, sport, dst, dport, cc and
    the figures of ``FIELDS`` it printed, ``retrans`` (total retransmitted segments)."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if not line[0].isspace():  # [STATE] RECV-Q SEND-Q LOCAL PEER
            ends = [w.rpartition(":") for w in words if w.rpartition(":")[2].isdigit()]
            if len(ends) >= 2:
                (src, _, sport), (dst, _, dport) = ends[-2:]
                out.append({"src": _address(src), "sport": int(sport),
                            "dst": _address(dst), "dport": int(dport)})  # fmt: skip
            continue
        if not out or "cc" in out[-1]:
            continue
        conn = out[-1]
        conn["cc"] = next((w for w in words if w in congestion), "")
        for i, w in enumerate(words):
            key, _, value = w.partition(":")
            if key in ("pacing_rate", "delivery_rate") and i + 1 < len(words):
                rate = _rate(words[i + 1])
                if rate is not None:
                    name, scale = FIELDS[key]
                    conn[name] = rate * scale
            elif key in ("rtt", "cwnd") and value:
                name, scale = FIELDS[key]
                conn[name] = float(value.split("/")[0]) * scale
            elif key == "retrans" and value:
                conn["retrans"] = int(value.split("/")[-1])
    return [c for c in out if "cc" in c]


def _address(text: str) -> str:
    """An end's address as ``ss`` prints it, an IPv4-mapped IPv6 one (a dual-stack
    socket's, as Gloo's) as the IPv4 address it is: routes are looked up by it."""
    text = text.strip("[]").partition("%")[0]
    try:
        mapped = ipaddress.ip_address(text)
    except ValueError:
        return text
    v4 = getattr(mapped, "ipv4_mapped", None)
    return str(v4) if v4 is not None else text


class ConnectionSampler:
    """Samples every host's connections every ``interval`` seconds until ``stop``."""

    def __init__(self, fabric: Fabric, congestion: tuple[str, ...], interval: float = 1.0):
        self.fabric, self.congestion, self.interval = fabric, congestion, interval
        self.by_conn: dict[tuple, dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> list[dict[str, Any]]:
        """The connections seen, a last look included (before the fabric goes)."""
        self._stop.set()
        self._thread.join(timeout=10)
        self._sample()
        return [self._summary(c) for c in self.by_conn.values()]

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        for i, name in enumerate(self.fabric.spec.host_names):
            text = _in(self.fabric.host(name), "ss", "-tinH", "state", "established")
            for conn in parse_ss(text, self.congestion):
                self._add(i, name, conn)

    def _add(self, i: int, host: str, conn: dict[str, Any]) -> None:
        key = (conn["src"], conn["sport"], conn["dst"], conn["dport"])
        seen = self.by_conn.get(key)
        if seen is None:
            seen = {"host": host, **{k: conn[k] for k in key_names()}, "cc": conn["cc"],
                    "spine": self._spine(i, conn), "samples": []}  # fmt: skip
            self.by_conn[key] = seen
        seen["samples"].append({k: conn[k] for k in (*_figures(), "retrans") if k in conn})

    def _spine(self, i: int, conn: dict[str, Any]) -> str:
        """The spine the sender's leaf picks for the connection ("" within a leaf)."""
        spec = self.fabric.spec
        leaf = self.fabric.leaves[i // spec.hosts_per_leaf]
        host = spec.host_names[i]
        out = _in(
            leaf, "ip", "route", "get", conn["dst"], "from", conn["src"], "iif",
            f"{leaf.name}-{host}", "ipproto", "tcp", "sport", str(conn["sport"]), "dport",
            str(conn["dport"]),
        )  # fmt: skip
        m = re.search(rf"dev {leaf.name}-s(\d+)", out)
        return f"spine{m[1]}" if m else ""

    @staticmethod
    def _summary(conn: dict[str, Any]) -> dict[str, Any]:
        samples = conn.pop("samples")
        out = dict(conn)
        for name in _figures():
            values = [s[name] for s in samples if name in s]
            if values:
                out[f"{name}_mean"] = round(sum(values) / len(values), 3)
                out[f"{name}_max"] = round(max(values), 3)
        out["retrans"] = max((s.get("retrans", 0) for s in samples), default=0)
        out["samples"] = len(samples)
        return out


def _in(node: Any, *argv: str) -> str:
    """``argv``'s output in ``node``'s network namespace (not through the node's shell,
    which the runner uses meanwhile)."""
    run = subprocess.run(["nsenter", f"--net=/proc/{node.pid}/ns/net", *argv],
                         capture_output=True, text=True, timeout=10, check=False)  # fmt: skip
    return run.stdout


def key_names() -> tuple[str, ...]:
    return ("src", "sport", "dst", "dport")


def _figures() -> tuple[str, ...]:
    return tuple(name for name, _ in FIELDS.values())
