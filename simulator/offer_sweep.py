"""The per-link model's fixed point by offers, links swept upstream first (numba).

Every crossing (a flow on a virtual link: a link's queue) holds an *offer*: the level
its queue would give the flow, whatever the flow's other links do. A flow's demand on
a link is the least offer of its other crossings; its rate, the least of all its
offers. A sweep visits the links in order of depth (hop from the senders, a NIC
first), and on each link its queues from the highest: a queue's offer is the level
``x`` at which its flows, each taking ``min(demand, x)``, fill what the queues above
left (``inf`` where all demands fit), and what they take is gone for the queues below.
Sweeps repeat until no offer moves by more than ``tol``. Where a cycle of queues makes
the offers swing (a queue that gives one flow more gives another less, whose other
queue then gives a third more, and so round) they do not settle; after ``PLAIN`` sweeps
each offer moves halfway to its level instead, and these damped sweeps settle.

Any point where the sweeps stop is a fixed point of the model: every flow gets the
least offer on its path, and every queue gives its flows max-min what the queues above
it leave. Started from offers of ``inf``, the sweeps take the one the fabric takes
where the model has many (a pooled queue closing a priority cycle): the upstream link
offers first, so it binds first, and the downstream queue sees only what passed it.
On a big switch that is the rule of ``fabric_rule`` (an upstream constraint decides a
tie with a downstream one) on every random instance ``tests/unit/test_offer_sweep.py``
checks; on longer paths, where damped sweeps can stop at another point of a
continuum, not always. The engines solve a priority cycle of up to ``MAX_CYCLE``
queues this way (``allocator_fill.sweep_in``, ``fast_fill._sweep_cycle``).
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.grouping import csr
from grouper.simulator.kernel import kernel

MAX_SWEEPS = 400  # the engines' bounds: past them a cycle's components are filled
MAX_CYCLE = 128  # one after another (queues of the cycle)
PLAIN = 50  # sweeps that set every offer to its level; after them each moves halfway
DAMPED = 0.5  # there (the offers of a cycle of queues can swing for ever otherwise)


@kernel
def offer_sweep(
    cf: np.ndarray, cv: np.ndarray, wt: np.ndarray, lfirst: np.ndarray, cap_v: np.ndarray,
    cost: np.ndarray, vdep: np.ndarray, fixed: np.ndarray, offer: np.ndarray,
    max_sweeps: int, tol: float,
) -> int:  # fmt: skip
    """Sweeps from ``offer`` (one per crossing, updated in place) until no offer moves
    by more than ``tol``; the sweeps that took, or -1 when ``max_sweeps`` ran out.

    Crossing ``i`` is flow ``cf[i]`` on virtual link ``cv[i]``; virtual links are
    numbered link by link, a link's queues from the highest, ``lfirst[v]`` the first of
    ``v``'s link; ``cap_v``, ``cost`` and ``vdep`` each virtual link's capacity, cost
    per unit of rate and its link's depth. ``wt[f]`` is how many flows ``f`` stands
    for (0: none, it takes no part). A queue of a swept link with no crossing keeps
    the use ``fixed[v]`` (per unit of cost): the flows swept share what it leaves."""
    n, nv = len(wt), len(lfirst)
    by_f, f_start = csr(cf, n)
    by_v, v_start = csr(cv, nv)
    links = _links_by_depth(cv, lfirst, vdep)
    dem, key = np.empty(len(cf)), np.empty(len(cf))
    for s in range(max_sweeps):
        step = 1.0 if s < PLAIN else DAMPED
        moved = 0.0
        for lk in links:
            avail = cap_v[lk]
            v = lk
            while v < nv and lfirst[v] == lk:
                lo, hi = v_start[v], v_start[v + 1]
                if hi > lo:
                    level, use = _queue(by_v[lo:hi], cf, cv, wt, offer, by_f, f_start,
                                        cost[v], avail, dem, key)  # fmt: skip
                    for k in range(lo, hi):
                        i = by_v[k]
                        if wt[cf[i]] > 0.0 and offer[i] != level:
                            new = level
                            if step < 1.0 and offer[i] < np.inf and level < np.inf:
                                new = offer[i] + step * (level - offer[i])
                            moved = max(moved, abs(new - offer[i]))
                            offer[i] = new
                    avail = max(avail - use, 0.0)
                else:
                    avail = max(avail - fixed[v] * cost[v], 0.0)
                v += 1
        if moved <= tol:
            return s + 1
    return -1


@kernel
def rates_of(cf: np.ndarray, wt: np.ndarray, offer: np.ndarray, out: np.ndarray) -> None:
    """Each flow's rate: the least offer on its path (0 for a flow that takes no part)."""
    out[:] = np.inf
    for i in range(len(cf)):
        out[cf[i]] = min(out[cf[i]], offer[i])
    for f in range(len(wt)):
        if wt[f] <= 0.0 or out[f] == np.inf:
            out[f] = 0.0


@kernel
def _links_by_depth(cv: np.ndarray, lfirst: np.ndarray, vdep: np.ndarray) -> np.ndarray:
    """The links the crossings ``cv`` are on (by their first virtual link), in order
    of depth, then of number."""
    firsts = np.unique(lfirst[cv])
    return firsts[np.argsort(vdep[firsts], kind="mergesort")]


@kernel
def _queue(
    members: np.ndarray, cf: np.ndarray, cv: np.ndarray, wt: np.ndarray,
    offer: np.ndarray, by_f: np.ndarray, f_start: np.ndarray, cost: float, avail: float,
    dem: np.ndarray, key: np.ndarray,
) -> tuple[float, float]:  # fmt: skip
    """One queue's level and what its flows take at it: each member crossing's flow
    demands the least offer of its crossings of other queues (``inf`` with none: a
    flow that crosses this queue again is held by the same level, and its offers there,
    read as demands, would feed the level back to itself); the level
    ``x`` solves ``sum cost * weight * min(demand, x) = avail`` (``inf`` where every
    demand fits)."""
    m = len(members)
    weight = 0.0
    for j in range(m):
        i = members[j]
        f = cf[i]
        d = np.inf
        for k in range(f_start[f], f_start[f + 1]):
            o = by_f[k]
            if cv[o] != cv[i]:
                d = min(d, offer[o])
        dem[j] = d
        key[j] = d
        if wt[f] > 0.0:
            weight += cost * wt[f]
    order = np.argsort(key[:m])
    use = 0.0
    for j in order:
        f = cf[members[j]]
        w = cost * wt[f]
        if w <= 0.0:
            continue
        if dem[j] * weight > avail:  # this demand and those after it exceed the share
            return avail / weight, use + avail
        use += w * dem[j]
        avail -= w * dem[j]
        weight -= w
    return np.inf, use
