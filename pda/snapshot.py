"""The scheduler's view of the cluster: remaining stage loads on ports.

Every host has one *ingress* port (its uplink: bytes it sends) and one *egress* port
(its downlink: bytes it receives), as in the big-switch abstraction. With ``H`` hosts,
port ``h`` is the ingress of host ``h`` and port ``H + h`` its egress. Traffic between
two endpoints on the same host loads no port.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import sparse

from grouper.common.errors import ConfigError
from grouper.pda.columns import Cojobs, ColumnMemo, Columns, columns, stage_ids
from grouper.pda.flow_table import flow_arrays
from grouper.pda.model import FlowSpec


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
    job_ids: list[str]  # "<cojob>:<job>"
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
    """Memo of each job's flows as arrays, across snapshots.

    Keyed by the identity of a job's ``flows`` tuple (held, so the id stays unique):
    callers that rebuild a job around the same flows (progress: the coordinator's
    merger, the simulator) convert its flows once, and a snapshot whose jobs all have
    the same flows as the last one's, in the same order, reuses its flow loads whole.
    Entries not used by the last snapshot are dropped; another host list starts afresh.
    It also holds the last snapshot's columns (``pda.columns``), patched next time at
    the cojobs that are new objects.
    """

    def __init__(self) -> None:
        self.hosts: tuple[str, ...] = ()
        self.entries: dict[int, JobFlows] = {}
        # the last snapshot's jobs (ids of their flows), their tables and flow loads:
        # a snapshot whose jobs have the very same flows reuses them
        self.keys: list[int] = []
        self.job_tables: list[JobFlows] = []
        self.loads: tuple[sparse.csr_matrix, tuple[np.ndarray, ...]] | None = None
        self.columns: ColumnMemo | None = None


@dataclass
class JobFlows:
    """One job's flows as host-index arrays (the simulator's coflow engine builds them
    too, so its loads are computed exactly as here)."""

    flows: tuple  # held so its id stays unique while cached
    src: np.ndarray
    dst: np.ndarray
    nbytes: np.ndarray


def _flow_table(flows: Sequence[FlowSpec], host_index: dict[str, int], where: str) -> JobFlows:
    return JobFlows(flows, *flow_arrays(flows, host_index, where))


def _check_ids(cojob_ids: list[str]) -> None:
    if len(set(cojob_ids)) != len(cojob_ids):
        seen: set[str] = set()
        for g, cid in enumerate(cojob_ids):
            if cid in seen:
                raise ConfigError(f"cojobs[{g}].id", f"duplicate cojob id {cid!r}")
            seen.add(cid)


def _columns_and_tables(
    cojobs: Cojobs, hosts: tuple[str, ...], host_index: dict[str, int], known_survivors: bool,
    tables: FlowTables,
) -> ColumnMemo:  # fmt: skip
    """The columns (the last ones patched when only some cojobs are new objects of the
    same shape) and every job's flow table, recorded in ``tables`` once all is checked."""
    if tables.hosts != hosts:
        tables.hosts, tables.entries, tables.keys, tables.columns = hosts, {}, [], None
    memo, patched = columns(cojobs, known_survivors, tables.columns)
    if not patched:  # check it all
        _check_ids(memo.cojob_ids)
        keys = [id(job.flows) for cj in cojobs for job in cj.jobs]
        if keys != tables.keys:  # other flows than the last snapshot's: look each job's up
            _job_tables(cojobs, host_index, tables)  # raises on bad flows, memo untouched
            tables.keys, tables.loads = keys, None
    tables.columns = memo
    return memo


def _job_tables(cojobs: Cojobs, host_index: dict[str, int], tables: FlowTables) -> None:
    """Every job's flow table, from the memo or converted (and checked) now."""
    used: dict[int, JobFlows] = {}
    job_tables = []
    for g, cj in enumerate(cojobs):
        for j, job in enumerate(cj.jobs):
            key = id(job.flows)
            table = used.get(key) or tables.entries.get(key)
            if table is None:
                table = _flow_table(job.flows, host_index, f"cojobs[{g}].jobs[{j}]")
            used[key] = table
            job_tables.append(table)
    tables.entries, tables.job_tables = used, job_tables


def build_snapshot(
    cojobs: Cojobs,
    hosts: list[str] | tuple[str, ...],
    *,
    known_survivors: bool = True,
    tables: FlowTables | None = None,
    job_done: np.ndarray | None = None,
) -> Snapshot:
    """Compute the remaining load of every unfinished stage on every port.

    With ``known_survivors`` a job with a known stage count contributes nothing to the
    stages after it (offline view); otherwise every job is assumed to run all remaining
    stages (the online assumption of the grouper paper, Section IV-C).

    One Python pass gathers the cojobs' stages and jobs into arrays, or the last
    snapshot's are patched at the cojobs that are new objects (``pda.columns``, with
    ``tables``); the rest is array
    algebra over all (job, stage) pairs at once, and the loads are sparse products:
    ``stage_loads = A @ job_iter_loads`` where ``A[row, j]`` is the iterations job
    ``j`` still has in the stage of that row. ``job_done`` (every job's iterations done,
    cojob by cojob) stands for the jobs' own ``done`` when given: the coordinator keeps
    progress in an array, so that progress replaces no job or cojob object.
    """
    hosts = tuple(hosts)
    host_index = {h: i for i, h in enumerate(hosts)}
    if len(host_index) != len(hosts):
        raise ConfigError("hosts", "duplicate host names")
    tables = tables or FlowTables()
    memo = _columns_and_tables(cojobs, hosts, host_index, known_survivors, tables)
    cols = memo.cols
    if job_done is not None:
        if len(job_done) != len(cols.job_done):
            n = len(cols.job_done)
            raise ValueError(f"job_done: {len(job_done)} jobs, the cojobs have {n}")
        cols = replace(cols, job_done=np.maximum(np.asarray(job_done, dtype=np.int64), 0))
    g_of_job = np.repeat(np.arange(len(cojobs), dtype=np.int64), cols.n_jobs)
    st = _stage_rows(cols, g_of_job)
    if tables.loads is None:
        tables.loads = flow_loads(tables.job_tables, len(hosts))
    job_iter, flows = tables.loads
    fj, fs, fd, fb = flows
    nj, ns = len(cols.job_done), len(st.cs)
    a = sparse.csr_matrix((st.a_vals, (st.a_rows, st.a_cols)), shape=(ns, nj))
    stage_loads = (a @ job_iter).tocsr()
    stage_loads.sum_duplicates()
    remote = fs != fd
    per_iter_sent = np.bincount(fj[remote], weights=fb[remote], minlength=nj)
    return Snapshot(
        hosts=hosts,
        cojob_ids=memo.cojob_ids,
        cojob_arrival=cols.arrival.copy(),  # the memo's own arrays stay the memo's
        stage_ids=stage_ids(memo, st.cs, st.cojob, st.number),
        stage_cojob=st.cojob,
        stage_number=st.number,
        stage_prev=st.prev,
        stage_started=st.started,
        stage_loads=stage_loads,
        stage_weight=st.weight,
        job_ids=memo.job_ids,
        job_cojob=g_of_job,
        job_stage=st.job_stage,
        job_iter_loads=job_iter,
        job_remaining=per_iter_sent * st.job_rem_iters,
        job_weight=cols.job_weight.copy(),
        flow_job=fj,
        flow_src=fs,
        flow_dst=fd,
        flow_bytes=fb,
    )


@dataclass
class _Stages:
    cs: np.ndarray  # (S,) cojob-stage index of each unfinished stage row
    cojob: np.ndarray
    number: np.ndarray
    prev: np.ndarray
    started: np.ndarray
    weight: np.ndarray
    job_stage: np.ndarray  # (J,)
    job_rem_iters: np.ndarray  # (J,)
    a_rows: np.ndarray
    a_cols: np.ndarray
    a_vals: np.ndarray


def _stage_rows(cols: Columns, g_of_job: np.ndarray) -> _Stages:
    """The unfinished stages (rows, cojob by cojob, stage by stage) and the iterations
    each job has left in each, over all (job, stage of its cojob) pairs at once."""
    n_st, its = cols.n_stages, cols.stage_its
    cs0 = np.cumsum(n_st) - n_st  # each cojob's first stage in the flat stage arrays
    g_of_cs = np.repeat(np.arange(len(n_st), dtype=np.int64), n_st)
    k_of_cs = np.arange(len(its), dtype=np.int64) - cs0[g_of_cs]
    hi = np.cumsum(its)
    hi -= (hi - its)[cs0][g_of_cs]  # iterations through the end of each stage
    lo = hi - its
    # pairs: every job with every stage of its cojob, job by job
    k_per_job = n_st[g_of_job]
    job_of = np.repeat(np.arange(len(g_of_job), dtype=np.int64), k_per_job)
    k_of = np.arange(len(job_of), dtype=np.int64) - np.repeat(
        np.cumsum(k_per_job) - k_per_job, k_per_job
    )
    cs_of = cs0[g_of_job][job_of] + k_of
    done = cols.job_done[job_of]
    rem = np.clip(np.minimum(hi[cs_of] - np.maximum(done, lo[cs_of]), its[cs_of]), 0, None)
    rem[k_of >= cols.job_runs[job_of]] = 0
    left = np.flatnonzero(rem)
    job_left, cs_left = job_of[left], cs_of[left]
    rows_cs = np.flatnonzero(np.bincount(cs_left, minlength=len(its)))
    row_of_cs = np.full(len(its), -1, dtype=np.int64)
    row_of_cs[rows_cs] = np.arange(len(rows_cs), dtype=np.int64)
    cojob = g_of_cs[rows_cs]
    r = np.arange(len(rows_cs), dtype=np.int64)
    prev = np.where((r > 0) & (cojob == np.roll(cojob, 1)), r - 1, -1)
    started = cols.stage_started[rows_cs]
    first = prev == -1
    arrival_first = first & np.isinf(started)
    started[arrival_first] = cols.arrival[cojob[arrival_first]]
    weight = np.full(len(its), -np.inf)
    np.maximum.at(weight, cs_left, cols.job_weight[job_left])
    return _Stages(
        rows_cs, cojob, k_of_cs[rows_cs] + 1, prev, started, weight[rows_cs],
        _job_stage(cols, g_of_job, job_left, row_of_cs[cs_left], cojob, r, first),
        np.bincount(job_of, weights=rem, minlength=len(g_of_job)),
        row_of_cs[cs_left], job_left, rem[left].astype(float),
    )  # fmt: skip


def _job_stage(
    cols: Columns, g_of_job: np.ndarray, job_left: np.ndarray, row_left: np.ndarray,
    cojob: np.ndarray, r: np.ndarray, first: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Row of the stage each job is in, -1 for jobs with nothing left. With the barrier,
    every job with work left is in the cojob's current stage: one that finished its
    iterations of it waits there and sends nothing, so the next stage must not take a
    band before the barrier lifts; without it, a job is in the first stage it has
    iterations left in. ``job_left``/``row_left``: the (job, row) pairs with iterations
    left, job by job and stage by stage."""
    nj = len(g_of_job)
    first_row = np.full(len(cols.n_stages), -1, dtype=np.int64)
    first_row[cojob[first]] = r[first]
    own = np.full(nj, -1, dtype=np.int64)
    if len(job_left):
        starts = np.flatnonzero(np.r_[True, job_left[1:] != job_left[:-1]])
        own[job_left[starts]] = row_left[starts]
    out = np.where(cols.barrier[g_of_job], first_row[g_of_job], own)
    out[np.bincount(job_left, minlength=nj) == 0] = -1
    return out


def flow_loads(
    job_tables: list[JobFlows], nh: int
) -> tuple[sparse.csr_matrix, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """Bytes per port of one iteration of each job, and every flow row (job, src, dst,
    bytes)."""
    nj = len(job_tables)
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
    return job_iter, (fj, fs, fd, fb)


def _concat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)
