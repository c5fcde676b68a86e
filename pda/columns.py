"""Every cojob's stages and jobs as flat columns, and the memo that patches them (pure).

A snapshot starts from one Python pass over all cojobs and jobs (:func:`columns`).
Callers that keep an unchanged cojob as the very same object (the coordinator's
merger: a period where a few jobs progressed replaces only their cojobs) get the last
columns copied and patched at the cojobs that are new objects. At 10,000 hosts (40,000
cojobs, 100,000 stages) the whole pass and the id strings took about 340 ms of a 1 s
cycle; a patch costs the cojobs that changed.

A cojob is patched in place only when its id, its stage count and its jobs (ids and
the very same flows, so the flow tables stay valid) are those of the cojob it
replaces; anything else (a cojob came, went or changed shape) redoes the whole pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import compress

import numpy as np

from grouper.pda.model import Cojob

Cojobs = list[Cojob] | tuple[Cojob, ...]


@dataclass
class Columns:
    """Every cojob's stages and every job, flattened in cojob order."""

    stage_its: np.ndarray  # (C,) iterations of each cojob stage, C = all cojobs' stages
    stage_started: np.ndarray  # (C,) inf when not started
    n_stages: np.ndarray  # (G,)
    n_jobs: np.ndarray  # (G,)
    barrier: np.ndarray  # (G,) bool
    arrival: np.ndarray  # (G,)
    job_done: np.ndarray  # (J,) iterations done, at least 0
    job_runs: np.ndarray  # (J,) stages the job runs in this view
    job_weight: np.ndarray  # (J,)


@dataclass
class ColumnMemo:
    """The last columns and what they were made from, for patching the next ones."""

    cojobs: list[Cojob]  # held, so the identities compared stay those of live objects
    known_survivors: bool
    cols: Columns
    stage0: list[int]  # each cojob's first row in the stage columns
    job0: list[int]  # its first job
    cojob_ids: list[str]
    job_ids: list[str]  # "<cojob>:<job>"
    stage_rows: np.ndarray | None = None  # the last snapshot's unfinished stages (rows)
    stage_ids: list[str] | None = None  # and their ids


def columns(cojobs: Cojobs, known_survivors: bool, memo: ColumnMemo | None) -> ColumnMemo:
    """The columns of ``cojobs``: ``memo``'s patched when only some cojobs were replaced
    by ones of the same shape, else made afresh (the caller checks cojob ids are unique
    then: a patch keeps every id where it was)."""
    if memo is not None and memo.known_survivors == known_survivors:
        patched = _patched(cojobs, memo)
        if patched is not None:
            return patched
    return _fresh(cojobs, known_survivors)


def stage_ids(memo: ColumnMemo, rows: np.ndarray, cojob: np.ndarray, number: np.ndarray) -> list:
    """``<cojob>/<n>`` of the unfinished stages ``rows``; the last list again when the
    rows are the last snapshot's (recorded in ``memo``)."""
    if memo.stage_ids is not None and np.array_equal(memo.stage_rows, rows):
        return memo.stage_ids
    cids = memo.cojob_ids
    ids = [f"{cids[g]}/{n}" for g, n in zip(cojob.tolist(), number.tolist(), strict=True)]
    memo.stage_rows, memo.stage_ids = rows, ids
    return ids


def _fresh(cojobs: Cojobs, known_survivors: bool) -> ColumnMemo:
    its: list[int] = []
    started: list[float] = []
    for cj in cojobs:
        k = len(cj.stage_iterations)
        its += cj.stage_iterations
        st = cj.stage_started[:k]
        started += st
        started += (math.inf,) * (k - len(st))
    jobs = [job for cj in cojobs for job in cj.jobs]
    n_stages = np.fromiter((len(cj.stage_iterations) for cj in cojobs), np.int64, len(cojobs))
    n_jobs = np.fromiter((len(cj.jobs) for cj in cojobs), np.int64, len(cojobs))
    runs = np.repeat(n_stages, n_jobs)
    if known_survivors:
        known = np.fromiter((-1 if j.stages is None else j.stages for j in jobs), np.int64)
        runs = np.where(known >= 0, known, runs)
    cols = Columns(
        np.asarray(its, dtype=np.int64),
        np.asarray(started, dtype=float),
        n_stages,
        n_jobs,
        np.fromiter((cj.barrier for cj in cojobs), bool, len(cojobs)),
        np.fromiter((cj.arrival for cj in cojobs), float, len(cojobs)),
        np.maximum(np.fromiter((job.done for job in jobs), np.int64, len(jobs)), 0),
        runs,
        np.fromiter((job.weight for job in jobs), float, len(jobs)),
    )
    cids = [c.cojob_id for c in cojobs]
    return ColumnMemo(
        list(cojobs), known_survivors, cols, (np.cumsum(n_stages) - n_stages).tolist(),
        (np.cumsum(n_jobs) - n_jobs).tolist(), cids,
        [f"{c.cojob_id}:{job.job_id}" for c in cojobs for job in c.jobs],
    )  # fmt: skip


def _patched(cojobs: Cojobs, memo: ColumnMemo) -> ColumnMemo | None:
    """``memo``'s columns with the cojobs that are new objects written in, or None when
    one of them differs in shape (or the count of cojobs changed)."""
    old = memo.cojobs
    if len(cojobs) != len(old):
        return None
    new = list(compress(range(len(old)), map(_differ, cojobs, old)))
    if any(not _same_shape(cojobs[g], old[g]) for g in new):
        return None
    c = memo.cols
    cols = Columns(*(getattr(c, f).copy() for f in c.__dataclass_fields__))
    _write(cols, [cojobs[g] for g in new], new, memo)
    return replace(memo, cojobs=list(cojobs), cols=cols)


def _differ(a: Cojob, b: Cojob) -> bool:
    return a is not b


def _same_shape(a: Cojob, b: Cojob) -> bool:
    return (
        a.cojob_id == b.cojob_id
        and len(a.stage_iterations) == len(b.stage_iterations)
        and len(a.jobs) == len(b.jobs)
        and all(
            x.flows is y.flows and x.job_id == y.job_id for x, y in zip(a.jobs, b.jobs, strict=True)
        )
    )


def _write(cols: Columns, cojobs: list[Cojob], at: list[int], memo: ColumnMemo) -> None:
    """The values of ``cojobs`` (cojob ``at[i]`` each, of its old shape) into the
    columns, gathered in one pass and written with one assignment per column."""
    s_at: list[int] = []
    its: list[int] = []
    started: list[float] = []
    j_at: list[int] = []
    done: list[int] = []
    runs: list[int] = []
    weight: list[float] = []
    known = memo.known_survivors
    for g, cj in zip(at, cojobs, strict=True):
        k, s0, j0 = len(cj.stage_iterations), memo.stage0[g], memo.job0[g]
        s_at += range(s0, s0 + k)
        its += cj.stage_iterations
        st = cj.stage_started[:k]
        started += st
        started += (math.inf,) * (k - len(st))
        j_at += range(j0, j0 + len(cj.jobs))
        for job in cj.jobs:
            done.append(job.done)
            runs.append(job.stages if known and job.stages is not None else k)
            weight.append(job.weight)
    cols.stage_its[s_at], cols.stage_started[s_at] = its, started
    cols.barrier[at] = [cj.barrier for cj in cojobs]
    cols.arrival[at] = [cj.arrival for cj in cojobs]
    cols.job_done[j_at] = np.maximum(np.asarray(done, dtype=np.int64), 0)
    cols.job_runs[j_at], cols.job_weight[j_at] = runs, weight
