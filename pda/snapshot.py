"""The scheduler's view of the cluster: remaining stage loads on ports.

Every host has one *ingress* port (its uplink: bytes it sends) and one *egress* port
(its downlink: bytes it receives), as in the big-switch abstraction. With ``H`` hosts,
port ``h`` is the ingress of host ``h`` and port ``H + h`` its egress. Traffic between
two endpoints on the same host loads no port.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from itertools import chain

import numpy as np
from scipy import sparse

from common.errors import ConfigError
from pda.model import Cojob


@dataclass
class Snapshot:
    """Unfinished stages, their jobs and flows, as arrays indexed by position."""

    hosts: tuple[str, ...]
    cojob_ids: list[str]
    cojob_arrival: np.ndarray  # (G,)
    # stages (rows of stage_loads)
    stage_ids: list[str]
    stage_cojob: np.ndarray  # (S,) cojob index
    stage_number: np.ndarray  # (S,) 1-based stage number in its cojob
    stage_prev: np.ndarray  # (S,) row of the previous unfinished stage of the cojob, or -1
    stage_started: np.ndarray  # (S,) start time, inf when not started yet
    stage_loads: sparse.csr_matrix  # (S, 2H) remaining bytes per port
    stage_weight: np.ndarray  # (S,) the largest weight of the stage's jobs (1 by default)
    # jobs
    job_ids: list[str]  # "<cojob>/<job>" is not unique-safe; use (cojob, job) pairs
    job_cojob: np.ndarray  # (J,)
    job_stage: np.ndarray  # (J,) row of the stage the job is in now, or -1 if it is done
    job_iter_loads: sparse.csr_matrix  # (J, 2H) bytes per port of one iteration
    job_remaining: np.ndarray  # (J,) bytes the job still sends (all its remaining stages)
    job_weight: np.ndarray  # (J,)
    # flows of every job (one row per per-iteration flow)
    flow_job: np.ndarray
    flow_src: np.ndarray  # host index
    flow_dst: np.ndarray
    flow_bytes: np.ndarray

    @property
    def num_ports(self) -> int:
        return 2 * len(self.hosts)

    def port_name(self, p: int) -> str:
        h = len(self.hosts)
        return f"{self.hosts[p % h]}:{'in' if p < h else 'out'}"

    def stage_index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.stage_ids)}


class FlowTables:
    """Memo of what a snapshot computes from each cojob alone, across snapshots.

    A cojob's part (:class:`_Block`: its jobs' flows as arrays, remaining iterations,
    unfinished stages and their loads, in local indices) is keyed by the identity of the
    :class:`Cojob` object and holds it; callers that keep unchanged cojobs as the same
    objects (the coordinator's merger, the simulator) pay only for the cojobs that
    changed. Flow arrays are also keyed by each job's ``flows`` tuple, so a job rebuilt
    around the same flows (progress) converts them once. Entries not used by the last
    snapshot are dropped; another host list or view starts afresh.
    """

    def __init__(self) -> None:
        self.hosts: tuple[str, ...] = ()
        self.known_survivors: bool | None = None
        self.entries: dict[int, _FlowTable] = {}
        self.blocks: dict[int, _Block] = {}


@dataclass
class _FlowTable:
    flows: tuple  # held so its id stays unique while cached
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray


@dataclass
class _Block:
    """One cojob's rows, in local indices (stage rows and jobs of this cojob only)."""

    cojob: Cojob  # held so its id stays unique while cached
    tables: list[_FlowTable]
    job_ids: list[str]
    job_rem_iters: list[float]
    job_weight: list[float]
    job_stage: list[int]  # local stage row of the current stage, or -1
    stage_ids: list[str]
    stage_number: list[int]
    stage_prev: list[int]  # local, or -1
    stage_started: list[float]
    stage_weight: list[float]
    a_rows: list[int]  # local stage row
    a_cols: list[int]  # local job
    a_vals: list[float]


def _flow_table(flows: tuple, host_index: dict[str, int], where: str) -> _FlowTable:
    src, dst, nbytes = [], [], []
    for i, f in enumerate(flows):
        try:
            s, d = host_index[f.src], host_index[f.dst]
        except KeyError:
            bad = "src" if f.src not in host_index else "dst"
            host = f.src if bad == "src" else f.dst
            raise ConfigError(f"{where}.flows[{i}].{bad}", f"unknown host {host!r}") from None
        if not (f.bytes > 0 and math.isfinite(f.bytes)):
            raise ConfigError(f"{where}.flows[{i}].bytes", f"must be positive, got {f.bytes!r}")
        src.append(s)
        dst.append(d)
        nbytes.append(f.bytes)
    return _FlowTable(
        flows,
        np.asarray(src, dtype=np.int64),
        np.asarray(dst, dtype=np.int64),
        np.asarray(nbytes, dtype=float),
    )


def _block(
    cj: Cojob, where: str, host_index: dict[str, int], known_survivors: bool,
    tables: FlowTables, used: dict[int, _FlowTable],
) -> _Block:  # fmt: skip
    job_tables = []
    for j, job in enumerate(cj.jobs):
        key = id(job.flows)
        table = used.get(key) or tables.entries.get(key)
        if table is None:
            table = _flow_table(job.flows, host_index, f"{where}.jobs[{j}]")
        used[key] = table
        job_tables.append(table)
    remaining = _remaining(cj, known_survivors)
    job_weight = [job.weight for job in cj.jobs]
    # unfinished stages of this cojob become rows
    stage_ids, number, prev_of, started_at, weight = [], [], [], [], []
    a_rows, a_cols, a_vals = [], [], []
    prev = -1
    for k, column in enumerate(zip(*remaining, strict=True)):  # each job's iterations in k
        if not any(column):
            continue
        r = len(stage_ids)
        stage_ids.append(cj.stage_id(k))
        number.append(k + 1)
        prev_of.append(prev)
        started = cj.stage_started[k] if k < len(cj.stage_started) else math.inf
        if prev == -1 and math.isinf(started):
            started = cj.arrival  # the cojob's first unfinished stage is under way
        started_at.append(started)
        jobs = [j for j, x in enumerate(column) if x]
        weight.append(max([job_weight[j] for j in jobs]))
        prev = r
        a_rows += [r] * len(jobs)
        a_cols += jobs
        a_vals += [column[j] for j in jobs]
    return _Block(
        cj,
        job_tables,
        [f"{cj.cojob_id}:{job.job_id}" for job in cj.jobs],
        [float(sum(rem)) for rem in remaining],
        job_weight,
        _job_stages(cj, remaining, number),
        stage_ids,
        number,
        prev_of,
        started_at,
        weight,
        a_rows,
        a_cols,
        a_vals,
    )


def _remaining(cj: Cojob, known_survivors: bool) -> list[list[int]]:
    """Iterations every job has left in every stage (0 in stages it will not run, when
    the view knows)."""
    bounds = []
    end = 0
    for it in cj.stage_iterations:
        bounds.append((end, end + it))
        end += it
    out = []
    for job in cj.jobs:
        runs = len(bounds)
        if known_survivors and job.stages is not None:
            runs = job.stages
        done = max(0, job.done)
        out.append([
            max(0, min(hi - max(done, lo), hi - lo)) if k < runs else 0
            for k, (lo, hi) in enumerate(bounds)
        ])  # fmt: skip
    return out


def _job_stages(cj: Cojob, remaining: list[list[int]], number: list[int]) -> list[int]:
    """Local row of the stage each job is in, -1 for jobs with nothing left. With the
    barrier, every job with work left is in the cojob's current stage: one that
    finished its iterations of it waits there and sends nothing, so the next stage must
    not take a band before the barrier lifts; without it, a job is in the first stage
    it has iterations left in."""
    if cj.barrier:
        return [0 if number and any(rem) else -1 for rem in remaining]
    row_of = {n - 1: r for r, n in enumerate(number)}
    return [
        row_of[next(k for k, it in enumerate(rem) if it)] if any(rem) else -1 for rem in remaining
    ]


def build_snapshot(
    cojobs: list[Cojob] | tuple[Cojob, ...],
    hosts: list[str] | tuple[str, ...],
    *,
    known_survivors: bool = True,
    tables: FlowTables | None = None,
) -> Snapshot:
    """Compute the remaining load of every unfinished stage on every port.

    With ``known_survivors`` a job with a known stage count contributes nothing to the
    stages after it (offline view); otherwise every job is assumed to run all remaining
    stages (the online assumption of the grouper paper, Section IV-C).

    Each cojob's part is computed alone (:func:`_block`, memoized in ``tables``) and
    the parts are put together with offsets; the loads are then sparse-matrix algebra:
    ``stage_loads = A @ job_iter_loads`` where ``A[row, j]`` is the iterations job
    ``j`` still has in the stage of that row.
    """
    hosts = tuple(hosts)
    host_index = {h: i for i, h in enumerate(hosts)}
    if len(host_index) != len(hosts):
        raise ConfigError("hosts", "duplicate host names")
    nh = len(hosts)
    tables = tables or FlowTables()
    if tables.hosts != hosts or tables.known_survivors != known_survivors:
        tables.hosts, tables.known_survivors, tables.entries, tables.blocks = (
            hosts, known_survivors, {}, {})  # fmt: skip
    used: dict[int, _FlowTable] = {}
    blocks: dict[int, _Block] = {}
    parts: list[_Block] = []
    seen_cojobs: set[str] = set()
    for g, cj in enumerate(cojobs):
        if cj.cojob_id in seen_cojobs:
            raise ConfigError(f"cojobs[{g}].id", f"duplicate cojob id {cj.cojob_id!r}")
        seen_cojobs.add(cj.cojob_id)
        block = tables.blocks.get(id(cj))
        if block is None:
            block = _block(cj, f"cojobs[{g}]", host_index, known_survivors, tables, used)
        else:
            for t in block.tables:
                used[id(t.flows)] = t
        blocks[id(cj)] = block
        parts.append(block)
    tables.entries, tables.blocks = used, blocks
    return _assemble(cojobs, hosts, parts, nh)


def _assemble(
    cojobs: list[Cojob] | tuple[Cojob, ...], hosts: tuple[str, ...], parts: list[_Block], nh: int
) -> Snapshot:
    """Put the cojobs' parts together: local rows and jobs shifted by their offsets."""
    ns_of = np.asarray([len(b.stage_ids) for b in parts], dtype=np.int64)
    nj_of = np.asarray([len(b.job_ids) for b in parts], dtype=np.int64)
    na_of = np.asarray([len(b.a_rows) for b in parts], dtype=np.int64)
    s0 = np.cumsum(ns_of) - ns_of
    j0 = np.cumsum(nj_of) - nj_of
    g_idx = np.arange(len(parts), dtype=np.int64)

    def shifted(local: np.ndarray, offset: np.ndarray) -> np.ndarray:
        return np.where(local >= 0, local + offset, -1)

    stage_prev = shifted(_flat([b.stage_prev for b in parts], np.int64), np.repeat(s0, ns_of))
    job_stage = shifted(_flat([b.job_stage for b in parts], np.int64), np.repeat(s0, nj_of))
    a_rows = _flat([b.a_rows for b in parts], np.int64) + np.repeat(s0, na_of)
    a_cols = _flat([b.a_cols for b in parts], np.int64) + np.repeat(j0, na_of)
    a_vals = _flat([b.a_vals for b in parts], float)
    job_tables = [t for b in parts for t in b.tables]
    nj, ns = int(nj_of.sum()), int(ns_of.sum())

    fj = np.repeat(np.arange(nj, dtype=np.int64), [len(t.nbytes) for t in job_tables])
    fs = _concat([t.src for t in job_tables], np.int64)
    fd = _concat([t.dst for t in job_tables], np.int64)
    fb = _concat([t.nbytes for t in job_tables], float)
    remote = fs != fd
    rows = np.concatenate([fj[remote], fj[remote]])
    cols = np.concatenate([fs[remote], nh + fd[remote]])
    vals = np.concatenate([fb[remote], fb[remote]])
    job_iter = sparse.csr_matrix((vals, (rows, cols)), shape=(nj, 2 * nh))
    job_iter.sum_duplicates()
    a = sparse.csr_matrix((a_vals, (a_rows, a_cols)), shape=(ns, nj))
    stage_loads = (a @ job_iter).tocsr()
    stage_loads.sum_duplicates()
    per_iter_sent = np.bincount(fj[remote], weights=fb[remote], minlength=nj)

    return Snapshot(
        hosts=hosts,
        cojob_ids=[c.cojob_id for c in cojobs],
        cojob_arrival=np.asarray([c.arrival for c in cojobs], dtype=float),
        stage_ids=[s for b in parts for s in b.stage_ids],
        stage_cojob=np.repeat(g_idx, ns_of),
        stage_number=_flat([b.stage_number for b in parts], np.int64),
        stage_prev=stage_prev,
        stage_started=_flat([b.stage_started for b in parts], float),
        stage_loads=stage_loads,
        stage_weight=_flat([b.stage_weight for b in parts], float),
        job_ids=[j for b in parts for j in b.job_ids],
        job_cojob=np.repeat(g_idx, nj_of),
        job_stage=job_stage,
        job_iter_loads=job_iter,
        job_remaining=per_iter_sent * _flat([b.job_rem_iters for b in parts], float),
        job_weight=_flat([b.job_weight for b in parts], float),
        flow_job=fj,
        flow_src=fs,
        flow_dst=fd,
        flow_bytes=fb,
    )


def _flat(lists: list[list], dtype: type) -> np.ndarray:
    return np.fromiter(chain.from_iterable(lists), dtype=dtype)


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
