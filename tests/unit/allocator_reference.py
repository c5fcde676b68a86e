"""The plain-numpy allocator the compiled kernel (``simulator.allocator_kernel``) is
checked against: the same semantics, documented in :mod:`simulator.allocator`, written
with whole-array operations and no compiled loop.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

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
    """Rates of flows given which links they cross, link ``capacity`` and their queues.

    ``incidence`` is a flow x link matrix (1 where the flow crosses the link) or, faster,
    a pair of arrays (flow index, link index) with one entry per crossing. ``queue`` has
    one entry per flow (the same queue on every link of its path) or, with
    ``per_crossing``, one per crossing in the order of the pairs. ``task`` (job of every
    flow) and ``penalty`` (eta / b) turn on the contention model. ``start`` (rates of
    a close allocation, e.g. the previous event's) only speeds the fixed point up: it is
    reached from any start in as many rounds as from zero.
    """
    if isinstance(incidence, tuple):
        pf, pl = (np.asarray(a, dtype=np.int64) for a in incidence)
        n = len(queue) if not per_crossing else int(pf.max(initial=-1)) + 1
    elif per_crossing:
        raise ValueError("per_crossing queues need the (flow, link) pair form")
    else:
        coo = sparse.coo_matrix(incidence)
        order = np.lexsort((coo.col, coo.row))
        pf, pl = coo.row[order].astype(np.int64), coo.col[order].astype(np.int64)
        n = incidence.shape[0]
    queue = np.asarray(queue, dtype=np.int64)
    pq = queue if per_crossing else queue[pf]
    if len(pq) != len(pf):
        raise ValueError(f"queue: {len(pq)} entries for {len(pf)} link crossings")
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
