"""The coflow benchmark's trace format as a workload (``--workload coflow:PATH``).

The format (github.com/coflow/coflow-benchmark, e.g. ``FB2010-1Hr-150-0.txt``)::

    <ports> <coflows>
    <id> <arrival ms> <#mappers> <mapper port>... <#reducers> <reducer port>:<MB>...

Every reducer's megabytes are split evenly over the coflow's mappers, as the benchmark's
README and CoflowSim do (1 MB = 2^20 bytes, CoflowSim's unit). A mapper on a reducer's
own port sends nothing over the fabric: that pair is left out, and a coflow left with
no flow at all is skipped (``meta["skipped"]`` names them). Every coflow is a one-stage,
one-iteration job of its own cojob, on a non-blocking fabric (a big switch) of the
trace's ports at ``gbps`` per port. The file is read directly, line by line; a bad line
is a :class:`ConfigError` naming the line and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from grouper.common.errors import ConfigError, short
from grouper.common.yamlfile import read_text
from grouper.pda.flow_table import FlowTable
from grouper.pda.model import Cojob, Job
from grouper.workloads.model import Workload

MB = 1048576.0  # bytes in the trace's megabyte (CoflowSim's unit)
MAX_PORTS = 100_000
DEFAULT_GBPS = 1.0  # Sincronia's evaluation


@dataclass
class CoflowTrace:
    """A parsed trace: coflows with traffic, in file order, and their flows."""

    ports: int
    ids: list[str] = field(default_factory=list)
    arrival: list[float] = field(default_factory=list)  # seconds
    # per coflow: its flows' (mapper port, reducer port, bytes), local pairs left out
    flows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # coflows with no fabric traffic

    @property
    def num_flows(self) -> int:
        return sum(len(f[0]) for f in self.flows)


def _int(token: str, where: str, lo: int, hi: int) -> int:
    try:
        value = int(token)
    except ValueError:
        raise ConfigError(where, f"expected an integer, got {short(token)}") from None
    if not lo <= value <= hi:
        raise ConfigError(where, f"must be between {lo} and {hi}, got {value}")
    return value


def _float(token: str, where: str) -> float:
    try:
        value = float(token)
    except ValueError:
        raise ConfigError(where, f"expected a number, got {short(token)}") from None
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(where, f"must be a finite number >= 0, got {short(token)}")
    return value


def _parse_header(line: str, where: str) -> tuple[int, int]:
    tokens = line.split()
    if len(tokens) != 2:
        raise ConfigError(f"{where} line 1", "expected '<ports> <coflows>'")
    ports = _int(tokens[0], f"{where} line 1: ports", 1, MAX_PORTS)
    count = _int(tokens[1], f"{where} line 1: coflows", 0, 10_000_000)
    return ports, count


def _parse_line(tokens: list[str], where: str, ports: int) -> tuple:
    """(id, arrival s, mapper ports, reducer ports, reducer MB) of one coflow line."""
    if len(tokens) < 3:
        raise ConfigError(f"{where}: mappers", "missing (expected '<id> <arrival ms> <#mappers>')")
    cid = tokens[0]
    arrival = _float(tokens[1], f"{where}: arrival") / 1000.0
    nm = _int(tokens[2], f"{where}: mappers", 1, ports)
    if len(tokens) < 4 + nm:
        raise ConfigError(f"{where}: mappers", f"{nm} mapper(s) announced, fewer given")
    mappers = [
        _int(t, f"{where}: mappers[{i}]", 0, ports - 1) for i, t in enumerate(tokens[3 : 3 + nm])
    ]
    nr = _int(tokens[3 + nm], f"{where}: reducers", 1, ports)
    rest = tokens[4 + nm :]
    if len(rest) != nr:
        raise ConfigError(f"{where}: reducers", f"{nr} reducer(s) announced, {len(rest)} given")
    reducers, mb = [], []
    for i, t in enumerate(rest):
        port, sep, size = t.partition(":")
        if not sep:
            raise ConfigError(f"{where}: reducers[{i}]", f"expected PORT:MB, got {short(t)}")
        reducers.append(_int(port, f"{where}: reducers[{i}].port", 0, ports - 1))
        mb.append(_float(size, f"{where}: reducers[{i}].mb"))
    if len(set(mappers)) != nm:
        raise ConfigError(f"{where}: mappers", "a port is listed twice")
    if len(set(reducers)) != nr:
        raise ConfigError(f"{where}: reducers", "a port is listed twice")
    return cid, arrival, mappers, reducers, mb


def parse_coflow_trace(text: str, where: str = "trace") -> CoflowTrace:
    lines = text.splitlines()
    if not lines:
        raise ConfigError(f"{where} line 1", "empty file (expected '<ports> <coflows>')")
    ports, count = _parse_header(lines[0], where)
    trace = CoflowTrace(ports)
    seen: set[str] = set()
    n = 0
    for lineno, line in enumerate(lines[1:], start=2):
        tokens = line.split()
        if not tokens:
            continue
        n += 1
        at = f"{where} line {lineno}"
        cid, arrival, mappers, reducers, mb = _parse_line(tokens, at, ports)
        if cid in seen:
            raise ConfigError(f"{at}: id", f"duplicate coflow id {short(cid)}")
        seen.add(cid)
        m = np.asarray(mappers, dtype=np.int64)
        src = np.tile(m, len(reducers))
        dst = np.repeat(np.asarray(reducers, dtype=np.int64), len(m))
        size = np.repeat(np.asarray(mb) * MB / len(m), len(m))
        keep = (src != dst) & (size > 0)
        if not keep.any():
            trace.skipped.append(cid)
            continue
        trace.ids.append(cid)
        trace.arrival.append(arrival)
        trace.flows.append((src[keep], dst[keep], size[keep]))
    if n != count:
        raise ConfigError(f"{where} line 1: coflows", f"says {count}, the file has {n}")
    return trace


def trace_workload(
    trace: CoflowTrace, gbps: float = DEFAULT_GBPS, name: str = "coflow"
) -> Workload:
    """Every coflow a one-stage, one-iteration job of its own cojob, on a big switch of
    the trace's ports at ``gbps`` (ideal fluid sharing, as coflow simulators assume).
    Each job's flows are a ``FlowTable`` (arrays, no object per flow)."""
    if not (gbps > 0 and math.isfinite(gbps)):
        raise ConfigError("--link-gbps", f"must be positive, got {gbps!r}")
    hosts = tuple(f"p{i}" for i in range(trace.ports))
    cojobs = []
    for cid, arrival, (src, dst, size) in zip(trace.ids, trace.arrival, trace.flows, strict=True):
        flows = FlowTable(hosts, src, dst, size)
        cojobs.append(Cojob(cid, (1,), (Job(cid, "flows", flows),), arrival))
    return Workload(
        name=name,
        hosts=hosts,
        cojobs=tuple(cojobs),
        capacity=gbps * 1e9 / 8,
        time_unit="s",
        contention="none",
        meta={"trace": name, "gbps": gbps, "flows": trace.num_flows, "skipped": trace.skipped},
    )


def load_coflow_trace(
    path: str, link_gbps: float = DEFAULT_GBPS, fraction: float = 1.0, **params: float
) -> Workload:
    """``coflow:PATH``: the trace at ``path`` at ``link_gbps`` per port; ``fraction``
    keeps its first coflows (with traffic). ``seed`` is accepted and unused (nothing is
    drawn); the generators' other parameters do not apply to a trace."""
    from grouper.common import validate as v

    for name in params:
        if name != "seed":
            raise ConfigError(f"--{name.replace('_', '-')}", "does not apply to a coflow trace")
    if not 0 < fraction <= 1:
        raise ConfigError("fraction", f"must be in (0, 1], got {fraction!r}")
    trace = parse_coflow_trace(read_text(path, "workload"), v.label_from_path(path))
    if fraction < 1.0:
        keep = max(1, math.ceil(len(trace.ids) * fraction))
        trace.ids, trace.arrival, trace.flows = (
            trace.ids[:keep], trace.arrival[:keep], trace.flows[:keep],
        )  # fmt: skip
    return trace_workload(trace, link_gbps, v.label_from_path(path))
