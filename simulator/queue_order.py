"""The order in which queues are filled (numba), shared by the allocator
(``allocator_kernel``) and the fast path (``fast_fill``).

A round of the allocator's fixed point fills *components*: queues (virtual links)
joined by the flows that cross them with every queue open. On a link, a queue's
capacity is what the queues above it leave, so a component whose queue lies below
another component's on some link is filled after it, in the capacity that one's fresh
rates leave. ``component_order`` puts the components in such an order; a component
above itself on some link (two of its queues on one link), or the components of a cycle
of such relations, cannot be ordered among themselves: they form a group, in its place
in the order, its components in the order of a sweep (``_sweep_order``), each filled
in what the fresh use of the queues before it and the last round's use of the rest
leave; what lies below the group follows it.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.grouping import csr
from grouper.simulator.kernel import kernel


@kernel
def find_root(par: np.ndarray, v: int) -> int:
    """The root of ``v`` in the union-find forest ``par`` (paths halved on the way)."""
    while par[v] != v:
        par[v] = par[par[v]]
        v = par[v]
    return v


@kernel
def flow_components(
    pf: np.ndarray, vidx: np.ndarray, vcap: np.ndarray, n: int, tol: float,
    by_flow: np.ndarray, flow_start: np.ndarray, gone: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:  # fmt: skip
    """The flows with every queue open (``vcap > tol``; the others get 0), not ``gone``,
    and the components their queues form (queues joined by a flow): (component of every
    queue or -1, whether each flow is active, number of components)."""
    nv = len(vcap)
    active = np.zeros(n, np.bool_)
    for f in range(n):
        active[f] = flow_start[f + 1] > flow_start[f] and not gone[f]
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


@kernel
def _edges(comp: np.ndarray, vlink: np.ndarray, nc: int) -> tuple:
    """The relation "has a queue just above one of" between components, as pairs
    (``src[e]`` just above ``dst[e]``), and which components lie above themselves (two
    of their queues on one link)."""
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
        prev = v
    return src[:ne], dst[:ne], loop


@kernel
def _search(
    r: int, succ: np.ndarray, start: np.ndarray, grp: np.ndarray, seen: np.ndarray,
    buf: np.ndarray, out: np.ndarray, n: int,
) -> int:  # fmt: skip
    """A depth-first search from ``r`` (marked seen) along ``succ``, into the components
    of ``r``'s group (``grp``) not seen yet, each put in ``out`` from ``n`` on as the
    search leaves it; returns where ``out`` ends. ``buf``: (2, components) of room."""
    stack, at = buf[0], buf[1]
    stack[0], at[0], h = r, start[r], 1
    while h > 0:
        c = stack[h - 1]
        if at[h - 1] < start[c + 1]:
            d = succ[at[h - 1]]
            at[h - 1] += 1
            if grp[d] == grp[r] and not seen[d]:
                seen[d] = True
                stack[h], at[h] = d, start[d]
                h += 1
        else:
            out[n] = c
            n += 1
            h -= 1
    return n


@kernel
def _finish_order(succ: np.ndarray, start: np.ndarray, nc: int) -> np.ndarray:
    """The components by the time a depth-first search along ``succ`` leaves them."""
    fin = np.empty(nc, np.int64)
    seen = np.zeros(nc, np.bool_)
    one, buf = np.zeros(nc, np.int64), np.empty((2, nc), np.int64)  # one group: all
    nf = 0
    for r in range(nc):
        if not seen[r]:
            seen[r] = True
            nf = _search(r, succ, start, one, seen, buf, fin, nf)
    return fin


@kernel
def component_order(
    comp: np.ndarray, vlink: np.ndarray, nc: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The components in groups, the groups in an order where every queue comes after
    the queues above it on its link: a group is one component, or the components of a
    cycle of "has a queue above one of" (one above itself on some link is a cycle of
    its own), in the order of its sweep. Returns the components group after group,
    where each group starts (``ng + 1``) and whether it is a cycle. The groups are the
    strongly connected components of that relation (Kosaraju's: a search along it, then
    one against it from the last component left, which meets the groups in order)."""
    src, dst, loop = _edges(comp, vlink, nc)
    by_src, start = csr(src, nc)
    by_dst, pstart = csr(dst, nc)
    succ, pred = dst[by_src], src[by_dst]  # the relation, and reversed
    fin = _finish_order(succ, start, nc)
    order = np.empty(nc, np.int64)
    gstart = np.zeros(nc + 1, np.int64)
    cyc = np.zeros(nc, np.bool_)
    seen = np.zeros(nc, np.bool_)
    n = ng = 0
    for i in range(nc - 1, -1, -1):
        r = fin[i]
        if seen[r]:
            continue
        seen[r] = True
        lo = n
        order[n] = r
        n += 1
        j = lo
        while j < n:  # the group of r: what reaches r along the relation, not seen yet
            c = order[j]
            j += 1
            for e in range(pstart[c], pstart[c + 1]):
                d = pred[e]
                if not seen[d]:
                    seen[d] = True
                    order[n] = d
                    n += 1
        cyc[ng] = n - lo > 1 or loop[r]
        ng += 1
        gstart[ng] = n
    _sweep_order(order, gstart[: ng + 1], succ, start, comp)
    return order, gstart[: ng + 1], cyc[:ng]


@kernel
def _sweep_order(
    order: np.ndarray, gstart: np.ndarray, succ: np.ndarray, start: np.ndarray,
    comp: np.ndarray,
) -> None:  # fmt: skip
    """Every group of more than one component put in the order it is swept in (filled
    one after another, each in what those before it left): the reverse of the order in
    which a depth-first search within the group leaves its components, started at the
    component with the first queue, each one's successors taken in the order of their
    queues. Every relation within the group then points forward but the search's back
    edges, and the order depends on the components, not on how they are numbered."""
    nc = len(order)
    if len(gstart) - 1 == nc:  # every group a single component: nothing to sweep
        return
    first = np.full(nc, len(comp), np.int64)  # every component's first queue
    for v in range(len(comp) - 1, -1, -1):
        if comp[v] >= 0:
            first[comp[v]] = v
    grp = np.empty(nc, np.int64)
    for g in range(len(gstart) - 1):
        grp[order[gstart[g] : gstart[g + 1]]] = g
    seen = np.zeros(nc, np.bool_)
    buf, left = np.empty((2, nc), np.int64), np.empty(nc, np.int64)
    for g in range(len(gstart) - 1):
        lo, hi = gstart[g], gstart[g + 1]
        if hi - lo < 2:
            continue
        r = order[lo]
        for c in order[lo:hi]:
            if first[c] < first[r]:
                r = c
        seen[r] = True
        m = _search(r, succ, start, grp, seen, buf, left, 0)
        order[lo:hi] = left[:m][::-1]
