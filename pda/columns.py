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
from operator import is_not
from typing import NamedTuple

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


def columns(
    cojobs: Cojobs, known_survivors: bool, memo: ColumnMemo | None
) -> tuple[ColumnMemo, bool]:
    """The columns of ``cojobs`` and whether they are ``memo``'s patched (only some
    cojobs were replaced by ones of the same shape); else they are made afresh, and the
    caller checks the cojob ids and flows (a patch keeps every id and flow where it was)."""
    if memo is not None and memo.known_survivors == known_survivors:
        patched = _patched(cojobs, memo)
        if patched is not None:
            return patched, True
    return _fresh(cojobs, known_survivors), False


def stage_ids(
    memo: ColumnMemo, rows: np.ndarray, cojob: np.ndarray, number: np.ndarray
) -> list[str]:
    """``<cojob>/<n>`` of the unfinished stages ``rows``; the last list again when the
    rows are the last snapshot's (recorded in ``memo``)."""
    if memo.stage_ids is not None and np.array_equal(memo.stage_rows, rows):
        return memo.stage_ids
    cids = memo.cojob_ids
    ids = [f"{cids[g]}/{n}" for g, n in zip(cojob.tolist(), number.tolist(), strict=True)]
    memo.stage_rows, memo.stage_ids = rows, ids
    return ids


class _Values(NamedTuple):
    """The column values of some cojobs, in their order (one Python pass)."""

    stage_its: list[int]
    stage_started: list[float]
    n_stages: list[int]
    n_jobs: list[int]
    job_done: list[int]
    job_runs: list[int]
    job_weight: list[float]


def _values(cojobs: Cojobs, known_survivors: bool) -> _Values:
    """What each cojob puts in the columns: its stages' iterations and start times (inf
    when not started), and per job the iterations done (at least 0), the stages it runs
    in this view and its weight. The one place these are read from cojobs."""
    v = _Values([], [], [], [], [], [], [])
    for cj in cojobs:
        k = len(cj.stage_iterations)
        v.stage_its.extend(cj.stage_iterations)
        st = cj.stage_started[:k]
        v.stage_started.extend(st + (math.inf,) * (k - len(st)))
        v.n_stages.append(k)
        v.n_jobs.append(len(cj.jobs))
        for job in cj.jobs:
            v.job_done.append(max(job.done, 0))
            v.job_runs.append(job.stages if known_survivors and job.stages is not None else k)
            v.job_weight.append(job.weight)
    return v


def _fresh(cojobs: Cojobs, known_survivors: bool) -> ColumnMemo:
    v = _values(cojobs, known_survivors)
    n_stages = np.asarray(v.n_stages, dtype=np.int64)
    n_jobs = np.asarray(v.n_jobs, dtype=np.int64)
    cols = Columns(
        np.asarray(v.stage_its, dtype=np.int64),
        np.asarray(v.stage_started, dtype=float),
        n_stages,
        n_jobs,
        np.fromiter((cj.barrier for cj in cojobs), bool, len(cojobs)),
        np.fromiter((cj.arrival for cj in cojobs), float, len(cojobs)),
        np.asarray(v.job_done, dtype=np.int64),
        np.asarray(v.job_runs, dtype=np.int64),
        np.asarray(v.job_weight, dtype=float),
    )
    return ColumnMemo(
        list(cojobs), known_survivors, cols, (np.cumsum(n_stages) - n_stages).tolist(),
        (np.cumsum(n_jobs) - n_jobs).tolist(), [c.cojob_id for c in cojobs],
        [f"{c.cojob_id}:{job.job_id}" for c in cojobs for job in c.jobs],
    )  # fmt: skip


def _patched(cojobs: Cojobs, memo: ColumnMemo) -> ColumnMemo | None:
    """``memo``'s columns with the cojobs that are new objects written in, or None when
    one of them differs in shape (or the count of cojobs changed)."""
    old = memo.cojobs
    if len(cojobs) != len(old):
        return None
    new = list(compress(range(len(old)), map(is_not, cojobs, old)))
    if any(not _same_shape(cojobs[g], old[g]) for g in new):
        return None
    c = memo.cols
    cols = Columns(*(getattr(c, f).copy() for f in c.__dataclass_fields__))
    _write(cols, [cojobs[g] for g in new], new, memo)
    return replace(memo, cojobs=list(cojobs), cols=cols)


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
    columns, with one assignment per column."""
    v = _values(cojobs, memo.known_survivors)
    s_at = [r for g in at for r in range(memo.stage0[g], memo.stage0[g] + cols.n_stages[g])]
    j_at = [r for g in at for r in range(memo.job0[g], memo.job0[g] + cols.n_jobs[g])]
    cols.stage_its[s_at], cols.stage_started[s_at] = v.stage_its, v.stage_started
    cols.barrier[at] = [cj.barrier for cj in cojobs]
    cols.arrival[at] = [cj.arrival for cj in cojobs]
    cols.job_done[j_at], cols.job_runs[j_at] = v.job_done, v.job_runs
    cols.job_weight[j_at] = v.job_weight
