"""The order in which queues are filled (numba), shared by the allocator
(``allocator_kernel``) and the fast path (``fast_fill``).

A round of the allocator's fixed point fills *components*: queues (virtual links)
joined by the flows that cross them with every queue open. On a link, a queue's
capacity is what the queues above it leave, so a component whose queue lies below
another component's on some link is filled after it, in the capacity that one's fresh
rates leave. ``component_order`` puts the components in such an order (Kahn's); a
component above itself on some link (two of its queues on one link), or one in a cycle
of such relations, cannot be ordered, and neither can what lies below it: those are
filled together after the others.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def find_root(par: np.ndarray, v: int) -> int:
    """The root of ``v`` in the union-find forest ``par`` (paths halved on the way)."""
    while par[v] != v:
        par[v] = par[par[v]]
        v = par[v]
    return v


@njit(cache=True)
def flow_components(
    pf: np.ndarray, vidx: np.ndarray, vcap: np.ndarray, n: int, tol: float,
    by_flow: np.ndarray, flow_start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:  # fmt: skip
    """The flows with every queue open (``vcap > tol``; the others get 0) and the
    components their queues form (queues joined by a flow): (component of every queue
    or -1, whether each flow is active, number of components)."""
    nv = len(vcap)
    active = np.zeros(n, np.bool_)
    for f in range(n):
        active[f] = flow_start[f + 1] > flow_start[f]
    for i in range(len(pf)):
        if vcap[vidx[i]] <= tol:
            active[pf[i]] = False
    par = np.arange(nv)
    has = np.zeros(nv, np.bool_)
    for f in range(n):
        if not active[f]:
            continue
        r0 = find_root(par, vidx[by_flow[flow_start[f]]])
        for c in range(flow_start[f], flow_start[f + 1]):
            v = vidx[by_flow[c]]
            has[v] = True
            r = find_root(par, v)
            if r != r0:
                lo = min(r, r0)
                par[max(r, r0)] = lo
                r0 = lo
    comp = np.full(nv, -1, np.int64)
    ids = np.full(nv, -1, np.int64)
    nc = 0
    for v in range(nv):
        if has[v]:
            r = find_root(par, v)
            if ids[r] < 0:
                ids[r] = nc
                nc += 1
            comp[v] = ids[r]
    return comp, active, nc


@njit(cache=True)
def component_order(comp: np.ndarray, vlink: np.ndarray, nc: int) -> tuple[np.ndarray, int]:
    """Components in an order where every queue comes after the queues above it on its
    link (Kahn's), and how many are so ordered; the rest (a component above itself on
    some link, and whatever lies below one) follow, unordered."""
    indeg = np.zeros(nc, np.int64)
    loop = np.zeros(nc, np.bool_)
    src = np.empty(len(comp), np.int64)
    dst = np.empty(len(comp), np.int64)
    ne = 0
    prev = -1
    for v in range(len(comp)):
        if v > 0 and vlink[v] != vlink[v - 1]:
            prev = -1
        if comp[v] < 0:
            continue
        if prev >= 0:
            a, b = comp[prev], comp[v]
            if a == b:
                loop[a] = True
            else:
                src[ne], dst[ne] = a, b
                ne += 1
                indeg[b] += 1
        prev = v
    est = np.zeros(nc + 1, np.int64)
    for e in range(ne):
        est[src[e] + 1] += 1
    for c in range(nc):
        est[c + 1] += est[c]
    succ = np.empty(ne, np.int64)
    cur = est[:-1].copy()
    for e in range(ne):
        succ[cur[src[e]]] = dst[e]
        cur[src[e]] += 1
    order = np.empty(nc, np.int64)
    done = np.zeros(nc, np.bool_)
    head = tail = 0
    for c in range(nc):
        if indeg[c] == 0 and not loop[c]:
            order[tail] = c
            tail += 1
    while head < tail:
        c = order[head]
        head += 1
        done[c] = True
        for e in range(est[c], est[c + 1]):
            d = succ[e]
            indeg[d] -= 1
            if indeg[d] == 0 and not loop[d]:
                order[tail] = d
                tail += 1
    ordered = tail
    for c in range(nc):
        if not done[c]:
            order[tail] = c
            tail += 1
    return order, ordered
