"""A job's flows as arrays, and the one place flows become host-index arrays.

A trace of 700,000 flows loads as a few :class:`FlowTable` arrays instead of a
``FlowSpec`` object per flow (0.8 s of the FB2010 trace's 0.9 s load was building those
objects, and the engines read them straight back into arrays). A ``FlowTable`` still
reads as the tuple of ``FlowSpec`` it stands for (each built on access), so code that
walks ``Job.flows`` works on either form; :func:`flow_arrays` is what reads them fast.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import overload

import numpy as np

from grouper.common.errors import ConfigError
from grouper.pda.model import FlowSpec


class FlowTable(Sequence[FlowSpec]):
    """Flows ``hosts[src[i]] -> hosts[dst[i]]`` of ``nbytes[i]`` bytes, read-only."""

    __slots__ = ("hosts", "src", "dst", "nbytes")

    def __init__(
        self, hosts: tuple[str, ...], src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray
    ) -> None:
        self.hosts = tuple(hosts)
        self.src = _frozen(src, np.int64)
        self.dst = _frozen(dst, np.int64)
        self.nbytes = _frozen(nbytes, np.float64)
        if not len(self.src) == len(self.dst) == len(self.nbytes):
            raise ValueError("FlowTable: src, dst and nbytes differ in length")
        for a in (self.src, self.dst):
            if len(a) and not (0 <= a.min() and a.max() < len(self.hosts)):
                raise ValueError("FlowTable: a host index is outside hosts")
        # names, not indices, say which flows are local: two indices of one name may not
        # both be used (``hosts`` may be a whole topology's: only the used ones count)
        used = self.used_hosts().tolist()
        if len({self.hosts[u] for u in used}) != len(used):
            raise ValueError("FlowTable: a host is named twice")

    def used_hosts(self) -> np.ndarray:
        """The indices in ``hosts`` that some flow uses, ascending."""
        n = len(self.hosts)
        return np.flatnonzero(
            np.bincount(self.src, minlength=n) + np.bincount(self.dst, minlength=n)
        )

    def __len__(self) -> int:
        return len(self.nbytes)

    @overload
    def __getitem__(self, i: int) -> FlowSpec: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[FlowSpec, ...]: ...
    def __getitem__(self, i: int | slice) -> FlowSpec | tuple[FlowSpec, ...]:
        if isinstance(i, slice):
            return tuple(self)[i]
        h = self.hosts
        return FlowSpec(h[self.src[i]], h[self.dst[i]], float(self.nbytes[i]))

    def __iter__(self) -> Iterator[FlowSpec]:
        h = self.hosts
        for s, d, b in zip(self.src.tolist(), self.dst.tolist(), self.nbytes.tolist(), strict=True):
            yield FlowSpec(h[s], h[d], b)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FlowTable | tuple):
            return len(self) == len(other) and tuple(self) == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __reduce__(self) -> tuple:  # pickled and copied through ``__init__``: read-only
        return (FlowTable, (self.hosts, self.src, self.dst, self.nbytes))

    def __repr__(self) -> str:
        return f"FlowTable({len(self)} flows over {len(self.hosts)} hosts)"


def _frozen(a: np.ndarray, dtype: type) -> np.ndarray:
    out = np.array(a, dtype=dtype)  # a copy: the caller's array may change later
    out.setflags(write=False)
    return out


def flow_arrays(
    flows: Sequence[FlowSpec], host_index: dict[str, int], where: str = "job"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(src, dst, bytes) of ``flows`` as arrays, hosts as ``host_index`` numbers them.
    An unknown host or bytes not positive and finite is a ConfigError naming
    ``{where}.flows[i]`` and the field."""
    if isinstance(flows, FlowTable):
        return _table_arrays(flows, host_index, where)
    n = len(flows)
    src, dst = np.empty(n, np.int64), np.empty(n, np.int64)
    nbytes = np.empty(n, np.float64)
    for i, f in enumerate(flows):
        try:
            src[i], dst[i] = host_index[f.src], host_index[f.dst]
        except KeyError:
            bad = "src" if f.src not in host_index else "dst"
            host = f.src if bad == "src" else f.dst
            raise ConfigError(f"{where}.flows[{i}].{bad}", f"unknown host {host!r}") from None
        if not (f.bytes > 0 and math.isfinite(f.bytes)):
            raise ConfigError(f"{where}.flows[{i}].bytes", f"must be positive, got {f.bytes!r}")
        nbytes[i] = f.bytes
    return src, dst, nbytes


def _table_arrays(
    t: FlowTable, host_index: dict[str, int], where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tuple form's checks, vectorized: the first flow with a problem is named,
    an unknown ``src`` before an unknown ``dst`` before its bytes."""
    used = t.used_hosts()  # a table over a whole topology's hosts: look up only these
    number = np.full(len(t.hosts), -1, dtype=np.int64)
    number[used] = [host_index.get(t.hosts[u], -1) for u in used.tolist()]
    src, dst = number[t.src], number[t.dst]
    bad_bytes = ~((t.nbytes > 0) & np.isfinite(t.nbytes))
    wrong = (src < 0) | (dst < 0) | bad_bytes
    if wrong.any():
        i = int(np.argmax(wrong))
        if src[i] < 0 or dst[i] < 0:
            bad = "src" if src[i] < 0 else "dst"
            host = t.hosts[(t.src if bad == "src" else t.dst)[i]]
            raise ConfigError(f"{where}.flows[{i}].{bad}", f"unknown host {host!r}")
        raise ConfigError(
            f"{where}.flows[{i}].bytes", f"must be positive, got {float(t.nbytes[i])!r}"
        )
    return src, dst, t.nbytes.copy()


def network_bytes(flows: Sequence[FlowSpec], local_on_ports: bool = False) -> np.ndarray:
    """The bytes of the flows that cross the network: those between two hosts, or every
    flow with ``local_on_ports`` (a host's traffic to itself on its ports)."""
    if isinstance(flows, FlowTable):
        return flows.nbytes[(flows.src != flows.dst) | local_on_ports]
    return np.asarray(
        [f.bytes for f in flows if local_on_ports or f.src != f.dst], dtype=np.float64
    )
