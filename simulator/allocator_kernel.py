"""The compiled allocator (numba): strict priority per link, max-min fair per queue.

Semantics are those documented in :mod:`simulator.allocator`;
``tests/unit/allocator_reference.py`` keeps the plain-numpy version the kernel is
checked against. Inputs are one entry per link crossing: ``pf`` (flow), ``pl`` (link),
``pq`` (queue of the flow on that link), plus ``task`` per flow for the contention
model. Every loop costs the crossings it touches: progressive filling freezes a flow
once and walks its crossings once.

numba's disk cache (``cache=True``) records this module by its import name,
``grouper.simulator.allocator_kernel``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _group(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense ids of the distinct keys in sorted key order: (id per entry, entries
    sorted by id, start of every id's run in that order plus the end)."""
    order = np.argsort(key, kind="mergesort")
    ids = np.empty(len(key), dtype=np.int64)
    starts = np.empty(len(key) + 1, dtype=np.int64)
    nid = 0
    for k in range(len(order)):
        i = order[k]
        if k == 0 or key[i] != key[order[k - 1]]:
            starts[nid] = k
            nid += 1
        ids[i] = nid - 1
    starts[nid] = len(order)
    return ids, order, starts[: nid + 1]


@njit(cache=True)
def _costs(vidx: np.ndarray, tflow: np.ndarray, nv: int, penalty: float) -> np.ndarray:
    """Capacity used per unit of rate on every virtual link: 1 / efficiency of the
    number of distinct tasks in it (Wang et al., Eq. 5)."""
    cost = np.ones(nv)
    if penalty <= 0.0 or len(vidx) == 0:
        return cost
    tspan = tflow.max() + 1
    _, order, starts = _group(vidx * tspan + tflow)
    k = np.zeros(nv)
    for s in range(len(starts) - 1):
        k[vidx[order[starts[s]]]] += 1.0
    for v in range(nv):
        if k[v] > 1.0:
            cost[v] = (k[v] + (k[v] - 1.0) * penalty) / k[v]
    return cost


@njit(cache=True)
def _maxmin(
    pf: np.ndarray,
    pv: np.ndarray,
    vcap: np.ndarray,
    cost: np.ndarray,
    n: int,
    tol: float,
    by_flow: np.ndarray,
    flow_start: np.ndarray,
    by_v: np.ndarray,
    v_start: np.ndarray,
) -> np.ndarray:
    """Exact max-min fair rates by progressive filling over virtual links. ``by_flow``
    / ``flow_start`` list every flow's crossings, ``by_v`` / ``v_start`` every virtual
    link's."""
    nv = len(vcap)
    rates = np.zeros(n)
    residual = vcap.copy()
    count = np.zeros(nv)
    for i in range(len(pf)):
        count[pv[i]] += 1.0
    frozen = np.zeros(n, dtype=np.bool_)
    level = 0.0
    while True:
        delta = np.inf
        for v in range(nv):
            if count[v] > 0.0:
                share = residual[v] / (count[v] * cost[v])
                if share < delta:
                    delta = share
        if delta == np.inf:
            break
        delta = max(delta, 0.0)
        level += delta
        hit = False
        for v in range(nv):
            if count[v] > 0.0:
                residual[v] -= delta * count[v] * cost[v]
                if residual[v] <= tol:
                    residual[v] = 0.0
                    hit = True
        if not hit:
            break
        for v in range(nv):
            if count[v] > 0.0 and residual[v] == 0.0:
                for k in range(v_start[v], v_start[v + 1]):
                    f = pf[by_v[k]]
                    if frozen[f]:
                        continue
                    frozen[f] = True
                    rates[f] = level
                    for c in range(flow_start[f], flow_start[f + 1]):
                        count[pv[by_flow[c]]] -= 1.0
    for i in range(len(pf)):  # flows still unfrozen (no saturated link): the last level
        f = pf[i]
        if not frozen[f]:
            rates[f] = level
    return rates


@njit(cache=True)
def _csr(idx: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries grouped by ``idx`` (stable) and the start of every group."""
    order = np.argsort(idx, kind="mergesort")
    start = np.zeros(size + 1, dtype=np.int64)
    for i in range(len(idx)):
        start[idx[i] + 1] += 1
    for k in range(size):
        start[k + 1] += start[k]
    return order, start


@njit(cache=True)
def _virtual_capacity(
    rates: np.ndarray,
    pf: np.ndarray,
    vidx: np.ndarray,
    cost: np.ndarray,
    vcap_link: np.ndarray,
    vlink: np.ndarray,
) -> np.ndarray:
    """What every queue gets: its link's capacity less what the queues above it use."""
    nv = len(vlink)
    used = np.zeros(nv)
    for i in range(len(pf)):
        used[vidx[i]] += rates[pf[i]]
    out = np.empty(nv)
    above = 0.0
    for v in range(nv):
        if v > 0 and vlink[v] != vlink[v - 1]:
            above = 0.0
        out[v] = max(vcap_link[v] - above, 0.0)
        above += used[v] * cost[v]
    return out


@njit(cache=True)
def allocate_kernel(
    pf: np.ndarray,
    pl: np.ndarray,
    pq: np.ndarray,
    tflow: np.ndarray,
    capacity: np.ndarray,
    penalty: float,
    n: int,
    start: np.ndarray,
    warm: bool,
    tol: float,
    max_rounds: int,
) -> tuple[np.ndarray, bool]:
    """Rates, and whether the per-link fixed point settled (False: the worst-queue
    fallback decided). ``tflow`` is the task of every crossing's flow."""
    span = pq.max() + 1
    vidx, by_v, v_start = _group(pl * span + pq)  # virtual links sorted: link, then queue
    nv = len(v_start) - 1
    vlink = np.empty(nv, dtype=np.int64)
    for v in range(nv):
        vlink[v] = pl[by_v[v_start[v]]]
    cost = _costs(vidx, tflow, nv, penalty)
    by_flow, flow_start = _csr(pf, n)
    cap_v = capacity[vlink]
    if warm:
        vcap = _virtual_capacity(start, pf, vidx, cost, cap_v, vlink)
    else:
        vcap = cap_v.copy()
    for _ in range(max_rounds):
        rates = _maxmin(pf, vidx, vcap, cost, n, tol, by_flow, flow_start, by_v, v_start)
        again = _virtual_capacity(rates, pf, vidx, cost, cap_v, vlink)
        settled = True
        for v in range(nv):
            if abs(again[v] - vcap[v]) > tol + 1e-9 * abs(vcap[v]):
                settled = False
                break
        if settled:
            return rates, True
        vcap = again
    return _by_worst_queue(pf, pl, pq, tflow, capacity, penalty, n, tol), False


@njit(cache=True)
def _by_worst_queue(
    pf: np.ndarray,
    pl: np.ndarray,
    pq: np.ndarray,
    tflow: np.ndarray,
    capacity: np.ndarray,
    penalty: float,
    n: int,
    tol: float,
) -> np.ndarray:
    """Every flow filled at its worst queue on the path, level by level, each level
    max-min fair in what the levels above left (feasible, work-conserving)."""
    level = np.full(n, -1, dtype=np.int64)
    for i in range(len(pf)):
        level[pf[i]] = max(level[pf[i]], pq[i])
    residual = capacity.astype(np.float64).copy()
    nl = len(residual)
    rates = np.zeros(n)
    lv = level[pf]
    for q in np.unique(lv):
        sel = np.flatnonzero(lv == q)
        spf, spl = pf[sel], pl[sel]
        cost = _costs(spl, tflow[sel], nl, penalty)
        by_flow, flow_start = _csr(spf, n)
        by_l, l_start = _csr(spl, nl)
        got = _maxmin(spf, spl, residual, cost, n, tol, by_flow, flow_start, by_l, l_start)
        for k in range(len(spf)):
            residual[spl[k]] -= got[spf[k]] * cost[spl[k]]
        for li in range(nl):
            residual[li] = max(residual[li], 0.0)
        rates += got
    return rates
