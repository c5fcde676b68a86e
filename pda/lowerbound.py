"""Lower bound on the sum of stage completion times (grouper paper, Section III-B).

LP-Primal: minimise sum_{g,k} S_{g,k} subject to
  (14) S_{g,k} - S_{g,k-1} >= L_p^{g,k} for every port p  (S_{g,0} = cojob arrival),
  (15) sum_{M in set} L_p^M S_M >= f_p(set) for every port p and stage set,
       f_p(set) = 1/2 (sum L_p^2 + (sum L_p)^2)   (Eq. 16).
(15) has exponentially many rows; they are added lazily. For a fixed port the most
violated set is a prefix of the stages sorted by their current S (Queyranne).

The LP starts with every prefix cut along PDA's order on every port (a good schedule's
order, so most of its prefixes bind), written as a chain: for a port's m stages in that
order, running sums Z_j = Z_{j-1} + L_p^{r_j} S_{r_j} and the bounds Z_j >= f_p(first j),
3 nonzeros per stage instead of a dense row per prefix. Its first solve is by interior
point. Each round then adds, per port, the most violated prefix of the stages sorted by
the current S as a row, and re-solves by dual simplex, warm from the last basis, until
no prefix is violated. The cuts are all of family (15), so the optimum is LP-Primal's.
The LP is solved with loads in units of the busiest port's total load.

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

from grouper.pda.snapshot import Snapshot

SLACK = 1e-7  # a hundred times HiGHS' primal feasibility tolerance (loads scaled to <= 1)


@dataclass
class LowerBound:
    value: float  # sum over stages of (S - cojob arrival)
    completion: np.ndarray  # S per stage row
    rounds: int
    cuts: int  # prefix cuts in the LP solved (a chain holds one per stage)
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
    seconds: float | None = None,
    seed: bool = True,
) -> LowerBound:
    """The LP bound; with ``seconds``, the rounds after the first stop at that deadline
    (the bound of the last round solved is returned, ``converged`` False if cuts were
    left; the first round always runs to its optimum).
    ``seed`` starts from a chain per port along PDA's order (off: from none; the same
    optimum, in more rounds). ``cuts`` counts the prefix cuts added."""
    started = time.monotonic()
    loads = sparse.csr_matrix(snap.stage_loads) / capacity
    n = loads.shape[0]
    if n == 0:
        return LowerBound(0.0, np.zeros(0), 0, 0, True)
    # the LP is solved in units of the busiest port's load (loads at most 1, f at most
    # 1): in bytes, coefficients of 1e12 and right-hand sides of 1e24 left cuts violated
    # by rounding alone, re-added every round
    unit = max(float(loads.sum(axis=0).max()), 1e-300)
    loads = loads / unit
    max_load = loads.max(axis=1).toarray().ravel()
    prev, arrival, trigger = _releases(snap, released)
    arrival = arrival / unit
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
    cuts = 0
    if seed:
        from grouper.pda.order import pda_order  # numba: imported when first needed

        position = np.empty(n, dtype=np.int64)
        position[pda_order(snap).order] = np.arange(n)
        cuts += lp.add_chains(_chains(csc, position))
    s = lp.solve(None)  # the first round always runs to its optimum: no bound before
    rounds = 1
    while True:
        rows, vals, rhs = _violated(csc, s, tol)
        left = None if seconds is None else seconds - (time.monotonic() - started)
        if not rows or rounds >= max_rounds or (left is not None and left <= 0):
            break
        lp.add_rows(rows, vals, rhs)
        nxt = lp.solve(left)
        if nxt is None:  # out of time inside the round: the last round solved stands
            break
        s, rounds, cuts = nxt, rounds + 1, cuts + len(rows)
    value = float(cost @ s[:n] - np.sum(arrival)) * unit
    return LowerBound(value, s[:n] * unit, rounds, cuts, not rows)


def _releases(
    snap: Snapshot, released: dict[int, int] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each stage's predecessor (a released cojob's first stage: its trigger stage), each
    stage's cojob arrival (0 for released cojobs), and each cojob's trigger row or -1."""
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
    return prev, arrival, trigger


def _violated(
    csc: sparse.csc_matrix, s: np.ndarray, tol: float
) -> tuple[list[np.ndarray], list[np.ndarray], list[float]]:
    """Cuts (15) that ``s`` violates: per port, the stages sorted by S; the prefix whose
    ``sum L S`` falls shortest of ``f`` (relative), if by more than ``tol`` relative and
    ``SLACK`` absolute (Queyranne: the most violated set is a prefix). A cut already in
    the LP can be violated within HiGHS' feasibility tolerance (more along a chain of
    running sums); without the absolute floor it came back every round, without end."""
    out_rows, out_vals, out_rhs = [], [], []
    for rows, vals in _columns(csc):
        if len(rows) == 0:
            continue
        idx = np.argsort(s[rows], kind="stable")
        rows, vals = rows[idx], vals[idx]
        lhs = np.cumsum(vals * s[rows])
        rhs = _f_prefixes(vals)
        short = rhs - lhs
        viol = np.where(short > SLACK, short / np.maximum(rhs, 1e-300), 0.0)
        j = int(np.argmax(viol))
        if viol[j] > tol:
            out_rows.append(rows[: j + 1])
            out_vals.append(vals[: j + 1])
            out_rhs.append(float(rhs[j]))
    return out_rows, out_vals, out_rhs


Chain = tuple[np.ndarray, np.ndarray, np.ndarray]  # stage rows, their loads, f of prefixes


def _chains(csc: sparse.csc_matrix, key: np.ndarray) -> list[Chain]:
    """For each port: its stages sorted by ``key`` (ties by row), their loads on it, and
    f_p of every prefix."""
    out = []
    for rows, vals in _columns(csc):
        if len(rows) == 0:
            continue
        idx = np.lexsort((rows, key[rows]))
        out.append((rows[idx], vals[idx], _f_prefixes(vals[idx])))
    return out


def _f_prefixes(vals: np.ndarray) -> np.ndarray:
    """f_p (Eq. 16) of every prefix of a port's stages with these loads, in order."""
    return 0.5 * (np.cumsum(vals**2) + np.cumsum(vals) ** 2)


def _columns(csc: sparse.csc_matrix) -> list[tuple[np.ndarray, np.ndarray]]:
    ptr = csc.indptr
    return [(csc.indices[ptr[p] : ptr[p + 1]], csc.data[ptr[p] : ptr[p + 1]])
            for p in range(csc.shape[1])]  # fmt: skip


class _Lp:
    """min cost.S, S >= lower, rows sum v S >= rhs, grown one batch of rows at a time.
    HiGHS keeps its basis between solves, so each round starts from the last optimum
    (dual simplex) instead of from scratch."""

    def __init__(self, cost: np.ndarray, lower: np.ndarray) -> None:
        import highspy

        self.h = highspy.Highs()
        self.h.setOptionValue("output_flag", False)
        # an equality per chain link: rounding in each adds up along a chain of hundreds
        self.h.setOptionValue("primal_feasibility_tolerance", 1e-9)
        self.inf = highspy.kHighsInf
        n = len(cost)
        self.h.addVars(n, lower, np.full(n, self.inf))
        self.h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
        self.h.setOptionValue("solver", "ipm")
        self.cols = n
        self.ok = highspy.HighsModelStatus.kOptimal
        self.time_out = highspy.HighsModelStatus.kTimeLimit

    def add_chains(self, chains: list[Chain]) -> int:
        """Every prefix cut of each chain, through running sums: new columns
        Z_j >= f_j (cost 0) and rows Z_j - Z_{j-1} - L_j S_{r_j} = 0. The number of cuts."""
        if not chains:
            return 0
        m = np.array([len(r) for r, _, _ in chains])
        total = int(m.sum())
        z = self.cols + np.arange(total)
        first = np.zeros(total, dtype=bool)
        first[np.r_[0, np.cumsum(m)[:-1]]] = True
        rows = np.concatenate([r for r, _, _ in chains])
        vals = np.concatenate([v for _, v, _ in chains])
        bound = np.concatenate([f for _, _, f in chains])
        self.h.addVars(total, bound, np.full(total, self.inf))
        self.cols += total
        # per row: Z_j, then Z_{j-1} unless it starts a chain, then S_{r_j}
        per = np.where(first, 2, 3)
        starts = np.r_[0, np.cumsum(per)[:-1]].astype(np.int32)
        idx = np.empty(int(per.sum()), dtype=np.int64)
        val = np.empty(len(idx))
        idx[starts], val[starts] = z, 1.0
        mid = starts[~first] + 1
        idx[mid], val[mid] = z[~first] - 1, -1.0
        last = starts + per - 1
        idx[last], val[last] = rows, -vals
        zero = np.zeros(total)
        self.h.addRows(total, zero, zero, len(idx), starts, idx.astype(np.int32), val)
        return total

    def add_rows(self, rows: list[np.ndarray], vals: list[np.ndarray], rhs: object) -> None:
        if not len(rows):
            return
        starts = np.r_[0, np.cumsum([len(r) for r in rows])[:-1]].astype(np.int32)
        idx = np.concatenate(rows).astype(np.int32)
        val = np.concatenate(vals).astype(np.float64)
        lower = np.asarray(rhs, dtype=np.float64)
        upper = np.full(len(rows), self.inf)
        self.h.addRows(len(rows), lower, upper, len(idx), starts, idx, val)

    def solve(self, seconds: float | None) -> np.ndarray | None:
        """The optimum's S, or None when ``seconds`` ran out first."""
        # HiGHS measures its time limit on a clock that runs across solves
        limit = self.inf if seconds is None else self.h.getRunTime() + seconds
        self.h.setOptionValue("time_limit", limit)
        self.h.run()
        # the first solve from scratch by interior point (4x faster than simplex on the
        # seeded 2,000-coflow LP), with crossover to a basis; later rounds add a few
        # rows and re-solve by dual simplex, warm from that basis
        self.h.setOptionValue("solver", "simplex")
        status = self.h.getModelStatus()
        if status == self.time_out:
            return None
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
