"""The scheduler's view of the cluster: remaining stage loads on ports.

Every host has one *ingress* port (its uplink: bytes it sends) and one *egress* port
(its downlink: bytes it receives), as in the big-switch abstraction. With ``H`` hosts,
port ``h`` is the ingress of host ``h`` and port ``H + h`` its egress. Traffic between
two endpoints on the same host loads no port.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from grouper.errors import ConfigError
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
    # jobs
    job_ids: list[str]  # "<cojob>/<job>" is not unique-safe; use (cojob, job) pairs
    job_cojob: np.ndarray  # (J,)
    job_stage: np.ndarray  # (J,) row of the stage the job is in now, or -1 if it is done
    job_iter_loads: sparse.csr_matrix  # (J, 2H) bytes per port of one iteration
    job_remaining: np.ndarray  # (J,) bytes the job still sends (all its remaining stages)
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


def build_snapshot(
    cojobs: list[Cojob] | tuple[Cojob, ...],
    hosts: list[str] | tuple[str, ...],
    *,
    known_survivors: bool = True,
) -> Snapshot:
    """Compute the remaining load of every unfinished stage on every port.

    With ``known_survivors`` a job with a known stage count contributes nothing to the
    stages after it (offline view); otherwise every job is assumed to run all remaining
    stages (the online assumption of the grouper paper, Section IV-C).
    """
    hosts = tuple(hosts)
    host_index = {h: i for i, h in enumerate(hosts)}
    if len(host_index) != len(hosts):
        raise ConfigError("hosts", "duplicate host names")
    nh = len(hosts)

    stage_ids: list[str] = []
    st_cojob: list[int] = []
    st_number: list[int] = []
    st_prev: list[int] = []
    st_started: list[float] = []
    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []

    job_ids: list[str] = []
    job_cojob: list[int] = []
    job_stage: list[int] = []
    job_remaining: list[float] = []
    jrows: list[np.ndarray] = []
    jcols: list[np.ndarray] = []
    jvals: list[np.ndarray] = []
    f_job: list[int] = []
    f_src: list[int] = []
    f_dst: list[int] = []
    f_bytes: list[float] = []

    seen_cojobs: set[str] = set()
    for g, cj in enumerate(cojobs):
        where = f"cojobs[{g}]"
        if cj.cojob_id in seen_cojobs:
            raise ConfigError(f"{where}.id", f"duplicate cojob id {cj.cojob_id!r}")
        seen_cojobs.add(cj.cojob_id)
        iters = np.asarray(cj.stage_iterations, dtype=np.int64)
        end = np.cumsum(iters)
        start = end - iters
        # per job: port vector of one iteration and remaining iterations per stage
        job_ports: list[tuple[np.ndarray, np.ndarray]] = []
        remaining = np.zeros((len(cj.jobs), cj.num_stages))
        for j, job in enumerate(cj.jobs):
            jw = f"{where}.jobs[{j}]"
            ports, loads = [], []
            for i, f in enumerate(job.flows):
                for end_name, host in (("src", f.src), ("dst", f.dst)):
                    if host not in host_index:
                        raise ConfigError(f"{jw}.flows[{i}].{end_name}", f"unknown host {host!r}")
                if not (f.bytes > 0 and math.isfinite(f.bytes)):
                    raise ConfigError(
                        f"{jw}.flows[{i}].bytes", f"must be positive, got {f.bytes!r}"
                    )
                s, d = host_index[f.src], host_index[f.dst]
                f_job.append(len(job_ids) + j)
                f_src.append(s)
                f_dst.append(d)
                f_bytes.append(f.bytes)
                if s != d:
                    ports += [s, nh + d]
                    loads += [f.bytes, f.bytes]
            if ports:
                p = np.asarray(ports, dtype=np.int64)
                uniq, inv = np.unique(p, return_inverse=True)
                job_ports.append((uniq, np.bincount(inv, weights=loads)))
            else:
                job_ports.append((np.zeros(0, np.int64), np.zeros(0)))
            runs = cj.num_stages
            if known_survivors and job.stages is not None:
                runs = job.stages
            done = max(0, job.done)
            rem = np.clip(end - np.maximum(done, start), 0, iters).astype(float)
            rem[runs:] = 0.0
            remaining[j] = rem
        # unfinished stages of this cojob become rows
        row_of_stage = {}
        prev = -1
        for k in range(cj.num_stages):
            if not remaining[:, k].any():
                continue
            r = len(stage_ids)
            row_of_stage[k] = r
            stage_ids.append(cj.stage_id(k))
            st_cojob.append(g)
            st_number.append(k + 1)
            st_prev.append(prev)
            started = cj.stage_started[k] if k < len(cj.stage_started) else math.inf
            if prev == -1 and math.isinf(started):
                started = cj.arrival  # the cojob's first unfinished stage is under way
            st_started.append(started)
            prev = r
            for j in range(len(cj.jobs)):
                p, load = job_ports[j]
                if remaining[j, k] > 0 and len(p):
                    rows.append(np.full(len(p), r))
                    cols.append(p)
                    vals.append(load * remaining[j, k])
        for j, job in enumerate(cj.jobs):
            job_ids.append(f"{cj.cojob_id}:{job.job_id}")
            job_cojob.append(g)
            active = np.flatnonzero(remaining[j] > 0)
            job_stage.append(row_of_stage[int(active[0])] if len(active) else -1)
            per_iter = sum(f.bytes for f in job.flows if f.src != f.dst)
            job_remaining.append(per_iter * remaining[j].sum())
            p, load = job_ports[j]
            jrows.append(np.full(len(p), len(job_ids) - 1))
            jcols.append(p)
            jvals.append(load)

    def csr(
        r: list[np.ndarray], c: list[np.ndarray], v: list[np.ndarray], n: int
    ) -> sparse.csr_matrix:
        if r:
            m = sparse.coo_matrix(
                (np.concatenate(v), (np.concatenate(r), np.concatenate(c))), shape=(n, 2 * nh)
            )
        else:
            m = sparse.coo_matrix((n, 2 * nh))
        out = m.tocsr()
        out.sum_duplicates()
        return out

    return Snapshot(
        hosts=hosts,
        cojob_ids=[c.cojob_id for c in cojobs],
        cojob_arrival=np.asarray([c.arrival for c in cojobs], dtype=float),
        stage_ids=stage_ids,
        stage_cojob=np.asarray(st_cojob, dtype=np.int64),
        stage_number=np.asarray(st_number, dtype=np.int64),
        stage_prev=np.asarray(st_prev, dtype=np.int64),
        stage_started=np.asarray(st_started, dtype=float),
        stage_loads=csr(rows, cols, vals, len(stage_ids)),
        job_ids=job_ids,
        job_cojob=np.asarray(job_cojob, dtype=np.int64),
        job_stage=np.asarray(job_stage, dtype=np.int64),
        job_iter_loads=csr(jrows, jcols, jvals, len(job_ids)),
        job_remaining=np.asarray(job_remaining, dtype=float),
        flow_job=np.asarray(f_job, dtype=np.int64),
        flow_src=np.asarray(f_src, dtype=np.int64),
        flow_dst=np.asarray(f_dst, dtype=np.int64),
        flow_bytes=np.asarray(f_bytes, dtype=float),
    )
