"""How a round of the compiled allocator (``allocator_kernel``) fills what it has
ordered (numba): a component by exact progressive filling in the capacities the queues
above leave (``fill_in``), a cycle's components together by offers (``sweep_in``,
``offer_sweep``); ``maxmin`` is also the worst-queue fallback's filling.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.grouping import csr
from grouper.simulator.kernel import kernel
from grouper.simulator.offer_sweep import MAX_SWEEPS, offer_sweep, rates_of


@kernel
def maxmin(
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


@kernel
def _fill_group(
    fl: np.ndarray, links: np.ndarray, vidx: np.ndarray, by_flow: np.ndarray,
    flow_start: np.ndarray, capnow: np.ndarray, cost: np.ndarray, tol: float,
    rates: np.ndarray, lmap: np.ndarray,
) -> None:  # fmt: skip
    """Max-min rates of the flows ``fl`` alone (crossing only ``links``), in ``capnow``'s
    capacities; ``lmap`` is -1 everywhere and left so."""
    for i in range(len(links)):
        lmap[links[i]] = i
    m = 0
    for f in fl:
        m += flow_start[f + 1] - flow_start[f]
    lpf = np.empty(m, np.int64)
    lpv = np.empty(m, np.int64)
    k = 0
    for j in range(len(fl)):
        for c in range(flow_start[fl[j]], flow_start[fl[j] + 1]):
            lpf[k], lpv[k] = j, lmap[vidx[by_flow[c]]]
            k += 1
    lcap, lcost = capnow[links], cost[links]
    lmap[links] = -1
    bf, fs = csr(lpf, len(fl))
    bv, vs = csr(lpv, len(links))
    r = maxmin(lpf, lpv, lcap, lcost, len(fl), tol, bf, fs, bv, vs)
    for j in range(len(fl)):
        rates[fl[j]] = r[j]


@kernel
def _cap_of(
    v: int, u: np.ndarray, cost: np.ndarray, cap_v: np.ndarray, lfirst: np.ndarray
) -> float:
    """What queue ``v`` gets: its link's capacity less what the queues above it use
    (``_capacities``' arithmetic, term by term)."""
    above = 0.0
    for w in range(lfirst[v], v):
        above += u[w] * cost[w]
    return max(cap_v[v] - above, 0.0)


@kernel
def sweep_in(
    group: np.ndarray, links: np.ndarray, vidx: np.ndarray, by_flow: np.ndarray,
    flow_start: np.ndarray, u: np.ndarray, cost: np.ndarray, cap_v: np.ndarray,
    lfirst: np.ndarray, vdep: np.ndarray, tol: float, rates: np.ndarray,
    filled: np.ndarray, pf: np.ndarray, by_v: np.ndarray, v_start: np.ndarray,
) -> bool:  # fmt: skip
    """The flows of a cycle's components (``group``, every flow of queues ``links``)
    solved by offers from infinity in what the queues above leave now; their rates, the
    use of their queues into ``u`` and the capacities that use leaves into ``filled``.
    False (nothing changed) where the sweeps do not settle."""
    m = 0
    for f in group:
        m += flow_start[f + 1] - flow_start[f]
    cf, cv = np.empty(m, np.int64), np.empty(m, np.int64)
    k = 0
    for j in range(len(group)):
        for c in range(flow_start[group[j]], flow_start[group[j] + 1]):
            cf[k], cv[k] = j, vidx[by_flow[c]]
            k += 1
    offer = np.full(m, np.inf)
    wt = np.ones(len(group))
    if offer_sweep(cf, cv, wt, lfirst, cap_v, cost, vdep, u, offer, MAX_SWEEPS, tol) < 0:
        return False
    got = np.empty(len(group))
    rates_of(cf, wt, offer, got)
    for j in range(len(group)):
        rates[group[j]] = got[j]
    for v in links:
        s = 0.0
        for j in range(v_start[v], v_start[v + 1]):
            s += rates[pf[by_v[j]]]
        u[v] = s
    for v in links:
        filled[v] = _cap_of(v, u, cost, cap_v, lfirst)
    return True


@kernel
def fill_in(
    group: np.ndarray, links: np.ndarray, vidx: np.ndarray, by_flow: np.ndarray,
    flow_start: np.ndarray, u: np.ndarray, cost: np.ndarray, cap_v: np.ndarray,
    lfirst: np.ndarray, tol: float, rates: np.ndarray, filled: np.ndarray, pf: np.ndarray,
    by_v: np.ndarray, v_start: np.ndarray, lmap: np.ndarray,
) -> None:  # fmt: skip
    """Flows ``group`` (every flow of queues ``links``) filled in what the queues above
    leave now; their capacities into ``filled``, their use into ``u``."""
    for v in links:  # every capacity first: the rest reads the last round's use there
        filled[v] = _cap_of(v, u, cost, cap_v, lfirst)
    _fill_group(group, links, vidx, by_flow, flow_start, filled, cost, tol, rates, lmap)
    for v in links:
        s = 0.0
        for j in range(v_start[v], v_start[v + 1]):
            s += rates[pf[by_v[j]]]
        u[v] = s
