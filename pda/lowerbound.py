"""Lower bound on the sum of stage completion times (grouper paper, Section III-B).

LP-Primal: minimise sum_{g,k} S_{g,k} subject to
  (14) S_{g,k} - S_{g,k-1} >= L_p^{g,k} for every port p  (S_{g,0} = cojob arrival),
  (15) sum_{M in set} L_p^M S_M >= f_p(set) for every port p and stage set,
       f_p(set) = 1/2 (sum L_p^2 + (sum L_p)^2)   (Eq. 16).
(15) has exponentially many rows; they are added lazily. For a fixed port the most
violated set is a prefix of the stages sorted by their current S (Queyranne), so each
round checks every port's prefixes and adds the ``per_port`` most violated ones per
port, then re-solves with HiGHS, warm from the last basis, until nothing is violated.

Times are in load units (bytes / port capacity with capacity 1).

A cojob released when a stage of another completes (``released``: cojob index -> that
stage's row) arrives at that stage's completion time, a variable: its first stage
gets S_first - S_trigger >= L instead of a fixed arrival, and the objective measures
its stages from S_trigger. Every real schedule is still feasible, so this stays a
lower bound, and the LP stays bounded (delaying the trigger delays the whole cojob).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from pda.snapshot import Snapshot


@dataclass
class LowerBound:
    value: float  # sum over stages of (S - cojob arrival)
    completion: np.ndarray  # S per stage row
    rounds: int
    cuts: int
    # no cut left: the LP's optimum. Else the rounds stopped early; every round's LP
    # relaxes the full one, so its optimum is still a lower bound, a weaker one.
    converged: bool = True


def lp_lower_bound(
    snap: Snapshot,
    *,
    capacity: float = 1.0,
    max_rounds: int = 500,
    tol: float = 1e-7,
    released: dict[int, int] | None = None,
    per_port: int = 1,
    seconds: float | None = None,
) -> LowerBound:
    """The LP bound; with ``seconds``, no new round starts after that long (the bound
    of the last round solved is returned, ``converged`` False if cuts were left)."""
    started = time.monotonic()
    loads = sparse.csr_matrix(snap.stage_loads) / capacity
    n = loads.shape[0]
    if n == 0:
        return LowerBound(0.0, np.zeros(0), 0, 0, True)
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

    # objective sum(S - arrival): a released cojob's stages are measured from S_trigger
    cost = np.ones(n)
    rel = np.flatnonzero(trigger[snap.stage_cojob] >= 0)
    np.subtract.at(cost, trigger[snap.stage_cojob[rel]], 1.0)
    lp = _Lp(cost, np.where(prev < 0, arrival + max_load, 0.0))
    # (14): S_k - S_{k-1} >= maxL_k ; first stages: S_k >= arrival + maxL_k (bounds)
    chained = np.flatnonzero(prev >= 0)
    lp.add_rows(
        [np.array([k, prev[k]]) for k in chained],
        [np.array([1.0, -1.0])] * len(chained),
        max_load[chained],
    )
    csc = loads.tocsc()
    rounds = cuts = 0
    while True:
        rounds += 1
        s = lp.solve()
        rows, vals, rhs = _violated(csc, s, tol, per_port)
        if not rows:
            break
        late = seconds is not None and time.monotonic() - started >= seconds
        if rounds >= max_rounds or late:
            break
        lp.add_rows(rows, vals, rhs)
        cuts += len(rows)
    value = float(cost @ s - np.sum(arrival))
    return LowerBound(value, s, rounds, cuts, not rows)


def _violated(
    csc: sparse.csc_matrix, s: np.ndarray, tol: float, per_port: int
) -> tuple[list[np.ndarray], list[np.ndarray], list[float]]:
    """Cuts (15) that ``s`` violates: per port, the stages sorted by S; the prefixes
    whose ``sum L S`` falls short of ``f`` by more than ``tol`` (relative), the
    ``per_port`` most violated of them (Queyranne: the most violated set is a prefix)."""
    out_rows, out_vals, out_rhs = [], [], []
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
        worst = np.argsort(-viol, kind="stable")[:per_port]
        for j in worst[viol[worst] > tol]:
            out_rows.append(rows[: j + 1])
            out_vals.append(vals[: j + 1])
            out_rhs.append(float(rhs[j]))
    return out_rows, out_vals, out_rhs


class _Lp:
    """min cost.S, S >= lower, rows sum v S >= rhs, grown one batch of rows at a time.
    HiGHS keeps its basis between solves, so each round starts from the last optimum
    (dual simplex) instead of from scratch."""

    def __init__(self, cost: np.ndarray, lower: np.ndarray) -> None:
        import highspy

        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        self.inf = highspy.kHighsInf
        n = len(cost)
        self.h.addVars(n, lower, np.full(n, self.inf))
        self.h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
        self.ok = highspy.HighsModelStatus.kOptimal

    def add_rows(self, rows: list[np.ndarray], vals: list[np.ndarray], rhs: object) -> None:
        if not len(rows):
            return
        starts = np.r_[0, np.cumsum([len(r) for r in rows])[:-1]].astype(np.int32)
        idx = np.concatenate(rows).astype(np.int32)
        val = np.concatenate(vals).astype(np.float64)
        lower = np.asarray(rhs, dtype=np.float64)
        upper = np.full(len(rows), self.inf)
        self.h.addRows(len(rows), lower, upper, len(idx), starts, idx, val)

    def solve(self) -> np.ndarray:
        self.h.run()
        status = self.h.getModelStatus()
        if status != self.ok:
            raise RuntimeError(
                f"LP lower bound: HiGHS ended with {self.h.modelStatusToString(status)}"
            )
        return np.asarray(self.h.getSolution().col_value)


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
