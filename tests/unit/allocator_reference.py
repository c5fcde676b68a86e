"""The plain-numpy allocator the compiled kernel (``simulator.allocator_kernel``) is
checked against: the same semantics, documented in :mod:`simulator.allocator`, written
with whole-array operations and no compiled loop.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

from grouper.simulator.allocator import crossings

EPS = 1e-12
MAX_ROUNDS = 8


def efficiency(k: np.ndarray, penalty: float) -> np.ndarray:
    """Eq. 5's efficiency of ``k`` concurrent tasks: k b / (k b + (k-1) eta)."""
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    return k / (k + (k - 1.0) * penalty)


def allocate_reference(
    incidence: sparse.csr_matrix | tuple[np.ndarray, np.ndarray],
    capacity: np.ndarray,
    queue: np.ndarray,
    task: np.ndarray | None = None,
    penalty: float = 0.0,
    *,
    per_crossing: bool = False,
    start: np.ndarray | None = None,
) -> np.ndarray:
    """``simulator.allocator.allocate``, in whole-array numpy."""
    pf, pl, pq, n = crossings(incidence, queue, per_crossing)
    rates = np.zeros(n)
    if n == 0 or len(pf) == 0:
        return rates
    capacity = np.asarray(capacity, dtype=float)
    span = int(pq.max()) + 1
    vkeys, vidx = np.unique(pl * span + pq, return_inverse=True)  # sorted: link, then queue
    vlink = vkeys // span
    cost = np.ones(len(vkeys))  # capacity used per unit of rate, per virtual link
    if penalty > 0 and task is not None:
        tspan = int(np.max(task)) + 1
        pairs = np.unique(vidx * tspan + np.asarray(task, dtype=np.int64)[pf])
        cost = 1.0 / efficiency(np.bincount(pairs // tspan, minlength=len(vkeys)), penalty)
    first = np.r_[0, np.flatnonzero(np.diff(vlink)) + 1]  # first virtual link of each link
    head = np.repeat(first, np.diff(np.r_[first, len(vkeys)]))
    tol = EPS * max(float(capacity.max(initial=0.0)), 1.0)

    def virtual_capacity(r: np.ndarray) -> np.ndarray:
        used = np.bincount(vidx, weights=r[pf], minlength=len(vkeys)) * cost
        before = np.cumsum(used) - used  # usage of everything before, in link order
        return np.maximum(capacity[vlink] - (before - before[head]), 0.0)

    vcap = capacity[vlink] if start is None else virtual_capacity(np.asarray(start, float))
    for _ in range(MAX_ROUNDS):
        rates = _maxmin(pf, vidx, vcap, cost, n, tol)
        again = virtual_capacity(rates)
        if np.allclose(again, vcap, rtol=1e-9, atol=tol):  # the same fill again: settled
            return rates
        vcap = again
    return _by_worst_queue(pf, pl, pq, capacity, task, penalty, n, tol)


def _maxmin(
    pf: np.ndarray, pv: np.ndarray, vcap: np.ndarray, cost: np.ndarray, n: int, tol: float
) -> np.ndarray:
    """Exact max-min fair rates by progressive filling over (virtual) links."""
    rates = np.zeros(n)
    nv = len(vcap)
    residual = vcap.copy()
    active = np.zeros(n, dtype=bool)
    active[pf] = True
    while active.any():
        on = active[pf]
        counts = np.bincount(pv[on], minlength=nv).astype(float)
        used = counts > 0
        if not used.any():
            break
        share = np.full(nv, np.inf)
        share[used] = residual[used] / (counts[used] * cost[used])
        delta = max(float(share.min()), 0.0)
        rates[active] += delta
        residual -= delta * counts * cost
        saturated = used & (residual <= tol)
        residual[saturated] = 0.0
        if not saturated.any():
            break
        hit = np.zeros(n, dtype=bool)
        hit[pf[saturated[pv]]] = True
        active &= ~hit
    return rates


def _by_worst_queue(
    pf: np.ndarray,
    pl: np.ndarray,
    pq: np.ndarray,
    capacity: np.ndarray,
    task: np.ndarray | None,
    penalty: float,
    n: int,
    tol: float,
) -> np.ndarray:
    """Fallback where per-link priorities form a cycle and the fixed point does not
    settle: every flow is filled at its worst queue on the path, level by level, each
    level max-min fair in what the levels above left (feasible, work-conserving)."""
    level = np.zeros(n, dtype=np.int64)
    np.maximum.at(level, pf, pq)
    residual = np.asarray(capacity, dtype=float).copy()
    rates = np.zeros(n)
    nl = len(residual)
    for lv in np.unique(level[pf]):
        sel = level[pf] == lv
        cost = np.ones(nl)
        if penalty > 0 and task is not None:
            tspan = int(np.max(task)) + 1
            keys = np.unique(pl[sel] * tspan + np.asarray(task, dtype=np.int64)[pf[sel]])
            cost = 1.0 / efficiency(np.bincount(keys // tspan, minlength=nl), penalty)
        got = _maxmin(pf[sel], pl[sel], residual, cost, n, tol)
        rates += got
        residual = np.maximum(
            residual - np.bincount(pl[sel], weights=got[pf[sel]], minlength=nl) * cost, 0.0
        )
    return rates
