"""Lower bound on the sum of stage completion times (grouper paper, Section III-B).

LP-Primal: minimise sum_{g,k} S_{g,k} subject to
  (14) S_{g,k} - S_{g,k-1} >= L_p^{g,k} for every port p  (S_{g,0} = cojob arrival),
  (15) sum_{M in set} L_p^M S_M >= f_p(set) for every port p and stage set,
       f_p(set) = 1/2 (sum L_p^2 + (sum L_p)^2)   (Eq. 16).
(15) has exponentially many rows; they are added lazily. For a fixed port the most
violated set is a prefix of the stages sorted by their current S (Queyranne), so each
round checks every port's prefixes and adds the most violated one per port, then
re-solves with HiGHS until nothing is violated.

Times are in load units (bytes / port capacity with capacity 1).

A cojob released when a stage of another completes (``released``: cojob index -> that
stage's row) arrives at that stage's completion time, a variable: its first stage
gets S_first - S_trigger >= L instead of a fixed arrival, and the objective measures
its stages from S_trigger. Every real schedule is still feasible, so this stays a
lower bound, and the LP stays bounded (delaying the trigger delays the whole cojob).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from pda.snapshot import Snapshot


@dataclass
class LowerBound:
    value: float  # sum over stages of (S - cojob arrival)
    completion: np.ndarray  # S per stage row
    rounds: int
    cuts: int


def lp_lower_bound(
    snap: Snapshot,
    *,
    capacity: float = 1.0,
    max_rounds: int = 500,
    tol: float = 1e-7,
    released: dict[int, int] | None = None,
) -> LowerBound:
    loads = sparse.csr_matrix(snap.stage_loads) / capacity
    n = loads.shape[0]
    if n == 0:
        return LowerBound(0.0, np.zeros(0), 0, 0)
    max_load = loads.max(axis=1).toarray().ravel()
    # a released cojob's first stage is chained to its trigger stage, arrival 0
    prev = snap.stage_prev.copy()
    arrival_of = snap.cojob_arrival.copy()
    trigger = np.full(len(arrival_of), -1, dtype=np.int64)
    for c, row in (released or {}).items():
        trigger[c], arrival_of[c] = row, 0.0
    first = np.flatnonzero((prev < 0) & (trigger[snap.stage_cojob] >= 0))
    prev[first] = trigger[snap.stage_cojob[first]]
    arrival = arrival_of[snap.stage_cojob]
    if not np.isfinite(arrival).all():
        raise ValueError("a cojob without a finite arrival and without a trigger stage")

    # (14) as -S_k + S_{k-1} <= -maxL_k ; first stages: S_k >= arrival + maxL_k via bounds
    chained = np.flatnonzero(prev >= 0)
    r = np.r_[np.arange(len(chained)), np.arange(len(chained))]
    c = np.r_[chained, prev[chained]]
    v = np.r_[-np.ones(len(chained)), np.ones(len(chained))]
    a14 = sparse.csr_matrix((v, (r, c)), shape=(len(chained), n))
    b14 = -max_load[chained]
    lower = np.where(prev < 0, arrival + max_load, 0.0)
    bounds = list(zip(lower, [None] * n, strict=True))

    csc = loads.tocsc()
    cut_rows: list[sparse.csr_matrix] = []
    cut_rhs: list[float] = []
    # objective sum(S - arrival): a released cojob's stages are measured from S_trigger
    cost = np.ones(n)
    rel = np.flatnonzero(trigger[snap.stage_cojob] >= 0)
    np.subtract.at(cost, trigger[snap.stage_cojob[rel]], 1.0)
    rounds = 0
    while True:
        rounds += 1
        a_ub = sparse.vstack([a14, *cut_rows]).tocsr() if cut_rows else a14
        b_ub = np.r_[b14, -np.asarray(cut_rhs)] if cut_rows else b14
        res = linprog(
            cost,
            A_ub=a_ub if a_ub.shape[0] else None,
            b_ub=b_ub if a_ub.shape[0] else None,
            bounds=bounds,
            method="highs",
        )
        if res.status != 0:
            raise RuntimeError(f"LP lower bound: HiGHS failed: {res.message}")
        s = res.x
        added = 0
        for p in range(csc.shape[1]):
            rows = csc.indices[csc.indptr[p] : csc.indptr[p + 1]]
            vals = csc.data[csc.indptr[p] : csc.indptr[p + 1]]
            if len(rows) == 0:
                continue
            idx = np.argsort(s[rows], kind="stable")
            rows, vals = rows[idx], vals[idx]
            lhs = np.cumsum(vals * s[rows])
            csum = np.cumsum(vals)
            rhs = 0.5 * (np.cumsum(vals**2) + csum**2)
            viol = (rhs - lhs) / np.maximum(rhs, 1e-300)
            j = int(np.argmax(viol))
            if viol[j] > tol:
                m = j + 1
                # sum L S >= f  ->  -sum L S <= -f
                cut_rows.append(
                    sparse.csr_matrix((-vals[:m], (np.zeros(m, np.int64), rows[:m])), shape=(1, n))
                )
                cut_rhs.append(float(rhs[j]))
                added += 1
        if added == 0 or rounds >= max_rounds:
            break
    value = float(cost @ s - np.sum(arrival))
    return LowerBound(value, s, rounds, len(cut_rows))


def single_port_sct(loads: np.ndarray, order: np.ndarray) -> float:
    """Sum of completion times when units run one after another in ``order`` on one
    port of capacity 1 (the order-preserving schedule on a single port)."""
    return float(np.cumsum(np.asarray(loads, float)[np.asarray(order)]).sum())


def brute_force_single_port(loads: np.ndarray, prev: np.ndarray) -> tuple[float, tuple[int, ...]]:
    """Optimal sum of completion times on one port over all chain-respecting orders.

    On a single port with all arrivals at 0, some non-preemptive order is optimal, so
    enumerating orders gives the true optimum. Exponential: tiny instances only.
    """
    n = len(loads)
    if n > 9:
        raise ValueError("brute force is for at most 9 stages")
    best = (float("inf"), ())
    for perm in itertools.permutations(range(n)):
        pos = {s: i for i, s in enumerate(perm)}
        if any(prev[s] >= 0 and pos[prev[s]] > pos[s] for s in range(n)):
            continue
        cost = single_port_sct(loads, np.asarray(perm))
        if cost < best[0] - 1e-12:
            best = (cost, perm)
    return best
