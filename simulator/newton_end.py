"""The exact end of the rounds (numba), shared by the allocator (``allocator_kernel``)
and the fast path (``fast_fill``): a Newton step on the piece of the fixed point the
rounds have reached.

The per-link model's map (a max-min filling in the capacities the rates leave) is
piecewise linear: once every flow's bottleneck is known, a virtual link (link, queue)
whose prefix (its queue and those above it on the link) fills the link, or a queue
below a full prefix that holds the flow at 0, the fixed point solves a linear system
with one unknown per bottleneck, the level its flows move at:

    sum over the flows f of the bottleneck's prefix of cost x weight_f x level(f) = capacity

Where the rounds converge slowly (a cycle of queues whose use comes back to itself,
each round a fraction closer), the bottlenecks stop changing long before the rates
settle, so the system gives the fixed point the rounds are heading for, to rounding.

The rule for ties (``fabric_rule``: where an upstream and a downstream constraint bind
together the upstream one is the bottleneck) is kept the same way as there: each link's
capacity is ``c (1 + eps x depth)`` and the rates are carried as ``v + eps w``, both
solved at once. A flow's bottleneck is taken at its most upstream candidate, and the
answer is kept only if it is a fixed point of the perturbed model, compared
lexicographically (``v`` first, then ``w``): rates not negative, every prefix within
its link, every moving flow the largest of its queue at its bottleneck, every held
flow below a full prefix. Otherwise the caller falls back.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.block_solve import solve
from grouper.simulator.grouping import csr
from grouper.simulator.kernel import kernel

SPOT = 1e-6  # relative: how close to full a prefix, or to its queue's largest a rate,
#              counts as there when the bottlenecks are read off the rounds' rates
EXACT = 1e-9  # relative: the tolerance of the check of the solved rates (``v``)
EXACT_W = 1e-6  # relative, for ``w``: a rate's sensitivity to eps, often many times it
ZERO = 1e-12  # relative: a solved rate below it is 0 (the allocator's own tolerance)


@kernel
def newton_end(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, rates: np.ndarray, lfirst: np.ndarray,
    cap_v: np.ndarray, cost: np.ndarray, vdep: np.ndarray, out: np.ndarray,
) -> bool:  # fmt: skip
    """The fixed point on the piece ``rates`` lie on, into ``out``; True when it is one
    (of the perturbed model), False (``out`` untouched) when not.

    Crossing ``i`` is flow ``cf[i]`` on virtual link ``cv[i]``; virtual links are
    numbered link by link, a link's queues from the highest, ``lfirst[v]`` the first of
    ``v``'s link; ``cap_v``, ``cost`` and ``vdep`` each virtual link's capacity, cost
    per unit of rate and its link's depth (hop from the senders, 1 for a NIC).
    ``wt[f]`` is how many flows ``f`` stands for (0: none, it takes no part)."""
    n, nv = len(wt), len(lfirst)
    if n == 0:
        return True
    by_f, f_start = csr(cf, n)
    scale = max(cap_v.max(), 1.0) if nv else 1.0
    choice = _bottlenecks(cf, cv, wt, rates, lfirst, cap_v, cost, vdep, by_f, f_start, scale)
    if choice[0] == _FAIL:
        return False
    row = np.full(nv, -1, np.int64)
    nb = 0
    for f in range(n):
        if choice[f] >= 0 and row[choice[f]] < 0:
            row[choice[f]] = nb
            nb += 1
    ok, rv, rw = _solve(cf, cv, wt, choice, row, nb, lfirst, cap_v, cost, vdep)
    if not ok or not _is_fixed_point(cf, cv, wt, choice, rv, rw, lfirst, cap_v, cost, vdep,
                                     scale):  # fmt: skip
        return False
    for f in range(n):  # rounding's crumbs (a level of 0 solved to 1e-17) are 0
        out[f] = rv[f] if rv[f] > ZERO * scale else 0.0
    return True


_FAIL = -(1 << 62)  # choice[0] when some flow has no bottleneck
_NONE = -(1 << 61)  # a flow that takes no part


@kernel
def _prefixes(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, r: np.ndarray, lfirst: np.ndarray,
    cost: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Every virtual link's prefix (the cost-weighted use of its queue and those above
    it on its link) and the part of it its own queue adds."""
    nv = len(lfirst)
    own = np.zeros(nv)
    for i in range(len(cf)):
        own[cv[i]] += wt[cf[i]] * r[cf[i]]
    pre = np.empty(nv)
    for v in range(nv):
        own[v] *= cost[v]
        pre[v] = own[v] + (pre[v - 1] if v > lfirst[v] else 0.0)
    return pre, own


@kernel
def _bottlenecks(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, r: np.ndarray, lfirst: np.ndarray,
    cap_v: np.ndarray, cost: np.ndarray, vdep: np.ndarray, by_f: np.ndarray,
    f_start: np.ndarray, scale: float,
) -> np.ndarray:  # fmt: skip
    """Each flow's bottleneck at rates ``r``: its most upstream virtual link whose
    prefix is full and where it moves as fast as any flow of its queue (``v``; a flow
    at 0 whose whole queue there is at 0 too may move at ``eps``), or, for a flow at 0
    with none, its most upstream queue below a full prefix (``-2 - v``: held there).
    ``choice[0] = _FAIL`` where some flow has neither."""
    n, nv = len(wt), len(lfirst)
    pre, own = _prefixes(cf, cv, wt, r, lfirst, cost)
    top = np.zeros(nv)
    for i in range(len(cf)):
        if wt[cf[i]] > 0.0:
            top[cv[i]] = max(top[cv[i]], r[cf[i]])
    choice = np.full(n, _NONE, np.int64)
    for f in range(n):
        if wt[f] <= 0.0:
            continue
        best, held, depth, hdepth = -1, -1, np.inf, np.inf
        for k in range(f_start[f], f_start[f + 1]):
            v = cv[by_f[k]]
            full = cap_v[v] * (1.0 - SPOT)
            if pre[v] >= full and r[f] >= top[v] - SPOT * scale:
                if vdep[v] < depth:
                    best, depth = v, vdep[v]
            if pre[v] - own[v] >= full and vdep[v] < hdepth:
                held, hdepth = v, vdep[v]
        if best >= 0:
            choice[f] = best
        elif held >= 0 and r[f] <= SPOT * scale:
            choice[f] = -2 - held
        else:
            choice[0] = _FAIL
            return choice
    return choice


@kernel
def _solve(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, choice: np.ndarray, row: np.ndarray,
    nb: int, lfirst: np.ndarray, cap_v: np.ndarray, cost: np.ndarray, vdep: np.ndarray,
) -> tuple[bool, np.ndarray, np.ndarray]:  # fmt: skip
    """The levels of the bottlenecks (rows ``v`` and ``w``: capacities ``c`` and
    ``c x depth``) and every flow's rate from them (0 held); False where singular."""
    n, nv = len(wt), len(lfirst)
    b = np.zeros((nb, 2))
    for v in range(nv):
        if row[v] >= 0:
            b[row[v], 0] = cap_v[v]
            b[row[v], 1] = cap_v[v] * vdep[v]
    start, col, val = _matrix(cf, cv, wt, choice, row, nb, lfirst, cost)
    rv, rw = np.zeros(n), np.zeros(n)
    ok, x = solve(start, col, val, b)
    if not ok:
        return False, rv, rw
    if not np.all(np.isfinite(x)):
        return False, rv, rw
    for f in range(n):
        if choice[f] >= 0:
            rv[f], rw[f] = x[row[choice[f]], 0], x[row[choice[f]], 1]
    return True, rv, rw


@kernel
def _matrix(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, choice: np.ndarray, row: np.ndarray,
    nb: int, lfirst: np.ndarray, cost: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The system's matrix by rows (``block_solve``'s form): row ``row[u]`` holds, for
    every flow of ``u``'s prefix with a bottleneck, cost x weight at its bottleneck's
    column, summed in a dense accumulator row by row (no sort)."""
    nv = len(lfirst)
    by_v, v_start = csr(cv, nv)
    rowv = np.empty(nb, np.int64)
    m = 0
    for u in range(nv):
        if row[u] >= 0:
            rowv[row[u]] = u
            m += v_start[u + 1] - v_start[lfirst[u]]
    start, col, val = np.zeros(nb + 1, np.int64), np.empty(m, np.int64), np.empty(m)
    acc, at = np.zeros(nb), np.full(nb, -1, np.int64)
    m = 0
    for i in range(nb):
        u = rowv[i]
        for j in range(v_start[lfirst[u]], v_start[u + 1]):  # the prefix's crossings
            f = cf[by_v[j]]
            if choice[f] < 0:
                continue
            c = row[choice[f]]
            if at[c] < 0:
                at[c], col[m] = m, c
                m += 1
            acc[c] += cost[cv[by_v[j]]] * wt[f]
        for k in range(start[i], m):
            val[k] = acc[col[k]]
            acc[col[k]], at[col[k]] = 0.0, -1
        start[i + 1] = m
    return start, col[:m], val[:m]


@kernel(inline="always")
def _at_most(xv: float, xw: float, yv: float, yw: float, tv: float, tw: float) -> bool:
    """``xv + eps xw <= yv + eps yw`` for every small enough ``eps > 0``."""
    return xv < yv - tv or (xv <= yv + tv and xw <= yw + tw)


@kernel
def _is_fixed_point(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, choice: np.ndarray, rv: np.ndarray,
    rw: np.ndarray, lfirst: np.ndarray, cap_v: np.ndarray, cost: np.ndarray,
    vdep: np.ndarray, scale: float,
) -> bool:  # fmt: skip
    """Rates not negative, every prefix within its link, every moving flow the largest
    of its queue at its bottleneck, every held flow below a full prefix: all compared
    as ``v + eps w`` (the perturbed capacities ``c (1 + eps x depth)``)."""
    n, nv = len(wt), len(lfirst)
    tv = EXACT * scale
    tw = EXACT_W * scale * max(vdep.max(), 1.0)
    for f in range(n):
        if choice[f] >= 0 and not _at_most(0.0, 0.0, rv[f], rw[f], tv, tw):
            return False
    pv, ov = _prefixes(cf, cv, wt, rv, lfirst, cost)
    pw, ow = _prefixes(cf, cv, wt, rw, lfirst, cost)
    for v in range(nv):
        if not _at_most(pv[v], pw[v], cap_v[v], cap_v[v] * vdep[v], tv, tw):
            return False
    tops, topw = np.full(nv, -np.inf), np.full(nv, -np.inf)
    for i in range(len(cf)):
        f, v = cf[i], cv[i]
        if wt[f] > 0.0 and not _at_most(rv[f], rw[f], tops[v], topw[v], 0.0, 0.0):
            tops[v], topw[v] = rv[f], rw[f]
    for f in range(n):
        c = choice[f]
        if c >= 0 and not _at_most(tops[c], topw[c], rv[f], rw[f], tv, tw):
            return False
        if c < 0 and c != _NONE:
            h = -2 - c
            above_v, above_w = pv[h] - ov[h], pw[h] - ow[h]
            if not _at_most(cap_v[h], cap_v[h] * vdep[h], above_v, above_w, tv, tw):
                return False
    return True
