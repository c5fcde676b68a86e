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

from grouper.simulator.allocator_fill import fill_in, maxmin, sweep_in
from grouper.simulator.anderson import REACH, REACH_LATE, extrapolate, history
from grouper.simulator.grouping import csr, runs
from grouper.simulator.kernel import kernel
from grouper.simulator.newton_end import newton_end
from grouper.simulator.queue_order import component_order, flow_components


@kernel
def _group(key: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Dense ids of the distinct keys in sorted key order: (id per entry, entries
    sorted by id, start of every id's run in that order plus the end)."""
    order = np.argsort(key, kind="mergesort")
    ids, starts = runs(key, order)
    return ids, order, starts


@kernel
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


@kernel
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
    gone: np.ndarray,
    tol: float,
    max_rounds: int,
    exact_every: int,
    max_cycle: int,
) -> tuple[np.ndarray, bool, np.ndarray]:
    """Rates, whether the per-link fixed point settled (False: the worst-queue
    fallback decided), and the rates of the last round's filling (the rates when it
    settled): the next allocation's start. ``tflow`` is the task of every crossing's
    flow; a cycle of at most ``max_cycle`` queues is solved by offers. Flows ``gone``
    (ended at the last event) count in the use the rounds start from, by their
    ``start`` rates, and nowhere else: no rate, no task, no queue to settle."""
    span = pq.max() + 1
    vidx, by_v, v_start = _group(pl * span + pq)  # virtual links sorted: link, then queue
    nv = len(v_start) - 1
    vlink = np.empty(nv, dtype=np.int64)
    for v in range(nv):
        vlink[v] = pl[by_v[v_start[v]]]
    real = np.empty(len(pf), np.bool_)
    moves = np.zeros(nv, np.bool_)  # a queue with a flow that is not gone
    for i in range(len(pf)):
        real[i] = not gone[pf[i]]
        moves[vidx[i]] |= real[i]
    cost = _costs(vidx[real], tflow[real], nv, penalty)
    by_flow, flow_start = csr(pf, n)
    cap_v = capacity[vlink]
    lfirst = np.empty(nv, np.int64)  # the first queue of every queue's link
    for v in range(nv):
        lfirst[v] = v if v == 0 or vlink[v] != vlink[v - 1] else lfirst[v - 1]
    used = _use(start if warm else np.zeros(n), pf, vidx, nv)
    xs, gs, mask, held = history(0)
    moved = np.zeros(nv, np.bool_)
    top = cap_v / cost  # the most use a queue's link can carry
    rates = np.zeros(n)
    vdep = _depths(pl, vlink, by_flow, flow_start)
    for k in range(max_rounds):
        start_k = used
        rates, filled, in_cycle = _ordered_round(
            pf, vidx, vlink, lfirst, used, cost, cap_v, n, tol, by_flow, flow_start, by_v,
            v_start, gone, vdep, max_cycle,
        )  # fmt: skip
        used = _use(rates, pf, vidx, nv)
        again = _capacities(used, cost, cap_v, vlink)
        settled = True
        for v in range(nv):
            if moves[v] and abs(again[v] - filled[v]) > tol + 1e-9 * abs(filled[v]):
                settled = False
                break
        if settled:
            return rates, True, rates
        if k % exact_every == exact_every - 1:  # the piece the rounds reached, solved
            ok, exact = _exact_end(pf, vidx, lfirst, cap_v, cost, gone, rates, flow_start,
                                   vdep)  # fmt: skip
            if ok:
                return exact, True, exact
        if len(mask) != nv:
            xs, gs, mask, held = history(nv)
        reach = REACH if k < exact_every else REACH_LATE
        extrapolate(used, start_k, in_cycle, xs, gs, mask, held, top, tol, moved, reach)
    return (
        _by_worst_queue(pf[real], pl[real], pq[real], tflow[real], capacity, penalty, n, tol),
        False,
        rates,
    )


@kernel
def _exact_end(
    pf: np.ndarray, vidx: np.ndarray, lfirst: np.ndarray, cap_v: np.ndarray,
    cost: np.ndarray, gone: np.ndarray, rates: np.ndarray, flow_start: np.ndarray,
    vdep: np.ndarray,
) -> tuple[bool, np.ndarray]:  # fmt: skip
    """``newton_end`` from the rounds' last filling ``rates``: whether it found the
    fixed point, and its rates. The flows it solves for are those not gone with a path."""
    n = len(rates)
    wt = np.zeros(n)
    for f in range(n):
        wt[f] = 1.0 if flow_start[f + 1] > flow_start[f] and not gone[f] else 0.0
    exact = np.zeros(n)
    return newton_end(pf, vidx, wt, rates, lfirst, cap_v, cost, vdep, exact), exact


@kernel
def _depths(
    pl: np.ndarray, vlink: np.ndarray, by_flow: np.ndarray, flow_start: np.ndarray
) -> np.ndarray:
    """Each queue's link's depth, for the rule on ties (``newton_end``): the link's
    earliest place on a flow's path, 1 for a first hop (a flow's crossings come in
    path order)."""
    ldep = np.full(pl.max() + 1 if len(pl) else 0, np.inf)
    for f in range(len(flow_start) - 1):
        for k in range(flow_start[f], flow_start[f + 1]):
            ldep[pl[by_flow[k]]] = min(ldep[pl[by_flow[k]]], k - flow_start[f] + 1.0)
    return ldep[vlink]


@kernel
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
        by_flow, flow_start = csr(spf, n)
        by_l, l_start = csr(spl, nl)
        got = maxmin(spf, spl, residual, cost, n, tol, by_flow, flow_start, by_l, l_start)
        for k in range(len(spf)):
            residual[spl[k]] -= got[spf[k]] * cost[spl[k]]
        for li in range(nl):
            residual[li] = max(residual[li], 0.0)
        rates += got
    return rates


@kernel
def _use(rates: np.ndarray, pf: np.ndarray, vidx: np.ndarray, nv: int) -> np.ndarray:
    used = np.zeros(nv)
    for i in range(len(pf)):
        used[vidx[i]] += rates[pf[i]]
    return used


@kernel
def _capacities(
    used: np.ndarray, cost: np.ndarray, cap_v: np.ndarray, vlink: np.ndarray
) -> np.ndarray:
    """What every queue gets: its link's capacity less what the queues above it use."""
    nv = len(vlink)
    out = np.empty(nv)
    above = 0.0
    for v in range(nv):
        if v > 0 and vlink[v] != vlink[v - 1]:
            above = 0.0
        out[v] = max(cap_v[v] - above, 0.0)
        above += used[v] * cost[v]
    return out


@kernel
def _ordered_round(
    pf: np.ndarray, vidx: np.ndarray, vlink: np.ndarray, lfirst: np.ndarray, used: np.ndarray,
    cost: np.ndarray, cap_v: np.ndarray, n: int, tol: float, by_flow: np.ndarray,
    flow_start: np.ndarray, by_v: np.ndarray, v_start: np.ndarray, gone: np.ndarray,
    vdep: np.ndarray, max_cycle: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """One round of the fixed point, queues in order: the open queues (by the last
    round's use) and the flows whose queues are all open; their components filled one
    after another so that a queue's capacity comes from the rates just computed above it
    (``queue_order``). The components of a cycle of at most ``max_cycle`` queues are
    solved together by offers (``offer_sweep``) in what the queues above leave; those
    of a larger cycle, or where the sweeps do not settle, are filled in the order of
    its sweep, each in what the fresh use before it and the last round's use of the
    rest leave it. Rates, and each queue's capacity at its filling (the last round's
    for a queue with no flow filled), and which queues are in a cycle's components."""
    vcap = _capacities(used, cost, cap_v, vlink)
    comp, active, nc = flow_components(pf, vidx, vcap, n, tol, by_flow, flow_start, gone)
    order, gstart, cyc = component_order(comp, vlink, nc)
    group = np.empty(nc, np.int64)  # each component's place in the order filled
    group[order] = np.arange(nc)
    ng = nc
    c_cyc = np.zeros(nc, np.bool_)
    for g in range(len(cyc)):
        c_cyc[order[gstart[g] : gstart[g + 1]]] = cyc[g]
    in_cycle = np.zeros(len(comp), np.bool_)
    for v in range(len(comp)):
        in_cycle[v] = comp[v] >= 0 and c_cyc[comp[v]]
    fgroup = np.full(n, -1, np.int64)
    for f in range(n):
        if active[f]:
            fgroup[f] = group[comp[vidx[by_flow[flow_start[f]]]]]
    vgroup = np.full(len(comp), -1, np.int64)
    for v in range(len(comp)):
        if comp[v] >= 0:
            vgroup[v] = group[comp[v]]
    fl_by, fl_start = _by_group(fgroup, ng)
    vl_by, vl_start = _by_group(vgroup, ng)
    u = used.copy()  # the use of every queue: this round's once filled
    for v in range(len(vlink)):
        if comp[v] < 0:  # no flow of it moves this round
            u[v] = 0.0
    filled = vcap.copy()
    rates = np.zeros(n)
    lmap = np.full(len(vlink), -1, np.int64)
    for gi in range(len(cyc)):
        g0, g1 = gstart[gi], gstart[gi + 1]
        if cyc[gi] and vl_start[g1] - vl_start[g0] <= max_cycle and sweep_in(
            fl_by[fl_start[g0] : fl_start[g1]], vl_by[vl_start[g0] : vl_start[g1]], vidx,
            by_flow, flow_start, u, cost, cap_v, lfirst, vdep, tol, rates, filled, pf, by_v,
            v_start,
        ):  # fmt: skip
            continue
        for g in range(g0, g1):
            fill_in(
                fl_by[fl_start[g] : fl_start[g + 1]], vl_by[vl_start[g] : vl_start[g + 1]],
                vidx, by_flow, flow_start, u, cost, cap_v, lfirst, tol, rates, filled, pf,
                by_v, v_start, lmap,
            )  # fmt: skip
    return rates, filled, in_cycle


@kernel
def _by_group(key: np.ndarray, groups: int) -> tuple[np.ndarray, np.ndarray]:
    """The indices with ``key >= 0`` grouped by key (``csr``, the others set aside in a
    group before the first), and where each group starts."""
    order, start = csr(key + 1, groups + 1)
    return order, start[1:]
