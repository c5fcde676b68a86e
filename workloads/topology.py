"""Topologies as directed links with capacities, and the path of every host pair.

* ``bigswitch:P``: P hosts, each with an uplink (its ingress port) and a downlink
  (its egress port), as in the scheduling model.
* ``leafspine:L,S,H,GBPS[,N][,uplink=GBPS]``: L leaves with H hosts each (N hosts in
  all if given), S spines, host links at GBPS Gbit/s and leaf-spine links at the
  ``uplink`` speed (default: GBPS). A flow between leaves is hashed onto one spine,
  deterministically for a given seed (like ECMP). Uplinks of at least H x GBPS make
  the fabric non-blocking whatever the hashing: the big switch of the scheduling model.

The first link of every path is the sender's NIC (queue = the flow's band); the others
are switch egress ports (queue chosen by the flow's DSCP).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from grouper.common.errors import ConfigError


@dataclass
class Topology:
    name: str
    hosts: tuple[str, ...]
    capacity: np.ndarray  # per directed link, bytes per time unit
    link_names: list[str]
    leaves: int = 1
    spines: int = 0
    per_leaf: int = 0
    seed: int = 0

    @property
    def num_links(self) -> int:
        return len(self.capacity)

    def path(self, src: int, dst: int, key: str = "") -> list[int]:
        """Links from host ``src`` to host ``dst``; ``key`` picks the spine (hash)."""
        n = len(self.hosts)
        if self.spines == 0:
            return [src, n + dst]
        ls, ld = src // self.per_leaf, dst // self.per_leaf
        if ls == ld:
            return [src, n + dst]
        spine = zlib.crc32(f"{self.seed}|{key}|{src}|{dst}".encode()) % self.spines
        up = 2 * n + ls * self.spines + spine
        down = 2 * n + self.leaves * self.spines + spine * self.leaves + ld
        return [src, up, down, n + dst]


def bigswitch(hosts: int | list[str], capacity: float = 1.0) -> Topology:
    names = tuple(hosts) if not isinstance(hosts, int) else tuple(f"h{i + 1}" for i in range(hosts))
    n = len(names)
    links = [f"{h}:up" for h in names] + [f"{h}:down" for h in names]
    return Topology(f"bigswitch:{n}", names, np.full(2 * n, float(capacity)), links)


def leafspine(
    leaves: int,
    spines: int,
    per_leaf: int,
    gbps: float,
    total: int | None = None,
    seed: int = 0,
    uplink_gbps: float | None = None,
) -> Topology:
    n = total or leaves * per_leaf
    if not 0 < n <= leaves * per_leaf:
        raise ConfigError("topology", f"{n} hosts do not fit {leaves} leaves x {per_leaf}")
    if not gbps > 0 or (uplink_gbps is not None and not uplink_gbps > 0):
        raise ConfigError("topology", "link speeds must be positive")
    names = tuple(f"h{i + 1}" for i in range(n))
    links = [f"{h}:up" for h in names] + [f"{h}:down" for h in names]
    links += [f"leaf{i}->spine{s}" for i in range(leaves) for s in range(spines)]
    links += [f"spine{s}->leaf{i}" for s in range(spines) for i in range(leaves)]
    cap = np.full(len(links), gbps * 1e9 / 8)
    cap[2 * n :] = (uplink_gbps or gbps) * 1e9 / 8
    name = f"leafspine:{leaves},{spines},{per_leaf},{gbps:g}"
    if uplink_gbps is not None:
        name += f",uplink={uplink_gbps:g}"
    return Topology(name, names, cap, links, leaves, spines, per_leaf, seed)


@dataclass(frozen=True)
class LeafSpineArgs:
    leaves: int
    spines: int
    per_leaf: int
    gbps: float
    total: int | None = None
    uplink_gbps: float | None = None


def leafspine_args(arg: str) -> LeafSpineArgs:
    """Parse ``L,S,H,GBPS[,N][,uplink=GBPS]`` (ValueError when malformed)."""
    parts = [p.strip() for p in arg.split(",")]
    options = dict(p.split("=", 1) for p in parts if "=" in p)
    pos = [p for p in parts if "=" not in p]
    if len(pos) not in (4, 5) or set(options) - {"uplink"}:
        raise ValueError(arg)
    return LeafSpineArgs(
        int(pos[0]),
        int(pos[1]),
        int(pos[2]),
        float(pos[3]),
        int(pos[4]) if len(pos) == 5 else None,
        float(options["uplink"]) if "uplink" in options else None,
    )


def parse_topology(
    spec: str, *, capacity: float = 1.0, seed: int = 0, hosts: tuple[str, ...] | None = None
) -> Topology:
    kind, _, arg = spec.partition(":")
    try:
        if kind == "bigswitch":
            return bigswitch(list(hosts) if hosts else int(arg), capacity)
        if kind == "leafspine":
            a = leafspine_args(arg)
            return leafspine(
                a.leaves, a.spines, a.per_leaf, a.gbps, a.total, seed, uplink_gbps=a.uplink_gbps
            )
    except ValueError:
        pass
    raise ConfigError(
        "topology", f"expected bigswitch:P or leafspine:L,S,H,GBPS[,N][,uplink=GBPS], got {spec!r}"
    )
