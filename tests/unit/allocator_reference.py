"""The plain-numpy allocator the compiled kernel (``simulator.allocator_kernel``) is
checked against: the same semantics, documented in :mod:`simulator.allocator`, written
with whole-array operations and no compiled loop.
"""

from __future__ import annotations

from graphlib import TopologicalSorter

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components

# the model's constants, shared: the rounds' limit, the tolerance, the extrapolation's
# memory, dropping and reach (the logic below is written apart; the parameters are the
# model's)
from grouper.simulator.allocator import EPS, EXACT_EVERY, MAX_ROUNDS, crossings
from grouper.simulator.anderson import DROP, MEMORY, REACH, REACH_LATE
from grouper.simulator.newton_end import EXACT, SPOT, ZERO
from grouper.simulator.offer_sweep import DAMPED, MAX_CYCLE, MAX_SWEEPS, PLAIN


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
    ended: np.ndarray | None = None,
    max_cycle: int = MAX_CYCLE,
) -> np.ndarray:
    """``simulator.allocator.allocate``, in whole-array numpy."""
    pf, pl, pq, n = crossings(incidence, queue, per_crossing)
    gone = np.zeros(n, bool) if ended is None else np.asarray(ended, bool)
    real = ~gone[pf]  # crossings of flows that did not end
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
        pairs = np.unique(vidx[real] * tspan + np.asarray(task, dtype=np.int64)[pf[real]])
        cost = 1.0 / efficiency(np.bincount(pairs // tspan, minlength=len(vkeys)), penalty)
    first = np.r_[0, np.flatnonzero(np.diff(vlink)) + 1]  # first virtual link of each link
    head = np.repeat(first, np.diff(np.r_[first, len(vkeys)]))
    tol = EPS * max(float(capacity.max(initial=0.0)), 1.0)

    def capacities(used: np.ndarray) -> np.ndarray:
        used = used * cost
        before = np.cumsum(used) - used  # usage of everything before, in link order
        return np.maximum(capacity[vlink] - (before - before[head]), 0.0)

    def use(r: np.ndarray) -> np.ndarray:
        return np.bincount(vidx, weights=r[pf], minlength=len(vkeys))

    moves = np.bincount(vidx[real], minlength=len(vkeys)) > 0
    used = np.zeros(len(vkeys)) if start is None else use(np.asarray(start, float))
    rounds: list[tuple[np.ndarray, np.ndarray]] = []  # (start, result) since the cycles'
    #                                                   queues last changed
    in_cycle_was = None
    for k in range(MAX_ROUNDS):
        start_k = used
        rates, filled, in_cycle = _ordered_round(
            pf, vidx, vlink, capacity[vlink], capacities(used), used, cost, n, tol, gone,
            _depths(pf, pl)[vlink], max_cycle,
        )  # fmt: skip
        used = use(rates)
        if np.allclose(capacities(used)[moves], filled[moves], rtol=1e-9, atol=tol):
            return rates  # settled
        wt = (~gone & (np.bincount(pf, minlength=n) > 0)).astype(float)
        piece = (pf, vidx, vlink, cost, capacity[vlink], _depths(pf, pl)[vlink], wt)
        last = k % EXACT_EVERY == EXACT_EVERY - 1  # the piece the rounds reached, solved
        exact = newton_reference(rates, *piece) if last else None
        if exact is not None:
            return exact
        if in_cycle_was is None or not np.array_equal(in_cycle, in_cycle_was):
            rounds, in_cycle_was = [], in_cycle
        rounds = (rounds + [(start_k, used)])[-(MEMORY + 1) :]
        to = anderson(
            [x[in_cycle] for x, _ in rounds], [g[in_cycle] for _, g in rounds],
            (capacity[vlink] / cost)[in_cycle], tol, REACH if k < EXACT_EVERY else REACH_LATE,
        )  # fmt: skip
        if to is not None:
            far = np.abs(to - used[in_cycle]) > tol  # smaller moves are rounding
            used = used.copy()
            used[np.flatnonzero(in_cycle)[far]] = to[far]
    return _by_worst_queue(pf[real], pl[real], pq[real], capacity, task, penalty, n, tol)


def anderson(
    xs: list[np.ndarray],
    gs: list[np.ndarray],
    top: np.ndarray,
    tol: float,
    reach: float = REACH,
) -> np.ndarray | None:
    """Anderson's extrapolation (type II) from rounds that started from ``xs`` and gave
    ``gs``, oldest first: ``g - dG gamma`` within ``[0, top]``, for the ``gamma`` that
    minimises the residual ``f - dF gamma`` (``f = g - x`` of the last round; ``dF``,
    ``dG`` the differences of consecutive rounds), directions that add less than
    ``DROP`` of their length (or no more than ``tol``) to the ones before them left
    out; None where there is nothing to extrapolate from, or where it would move
    further than ``reach`` times the largest residual."""
    if len(xs) < 2 or xs[-1].size == 0:
        return None
    res = np.array([g - x for x, g in zip(xs, gs, strict=True)])
    if np.abs(res[-1]).max() <= tol:
        return None
    df, dg = np.diff(res, axis=0), np.diff(np.array(gs), axis=0)
    keep = []
    for c in range(len(df)):  # a direction kept when it adds enough to those before it
        basis = df[keep].T
        rest = df[c] - basis @ np.linalg.lstsq(basis, df[c], rcond=None)[0] if keep else df[c]
        left = np.linalg.norm(rest)
        if left > DROP * np.linalg.norm(df[c]) and left > tol:
            keep.append(c)
    gamma = np.zeros(len(df))
    if keep:
        gamma[keep] = np.linalg.lstsq(df[keep].T, res[-1], rcond=None)[0]
    to = np.clip(gs[-1] - gamma @ dg, 0.0, top)
    return None if np.abs(to - gs[-1]).max() > reach * np.abs(res[-1]).max() else to


def _ordered_round(
    pf: np.ndarray, vidx: np.ndarray, vlink: np.ndarray, link_cap: np.ndarray,
    vcap: np.ndarray, used: np.ndarray, cost: np.ndarray, n: int, tol: float,
    gone: np.ndarray, dep_v: np.ndarray, max_cycle: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """One round, queues in order: flows with every queue open (``vcap > tol``), their
    components (scipy), filled in an order where a component comes after those with a
    queue above one of its queues on a link; the components of a cycle of that relation
    (of at most ``max_cycle`` queues) solved together by offers (``offers_reference``),
    or where those do not settle, in
    their place, one after another in the order of its sweep, each in capacities
    from the fresh use before it and ``used`` for the rest. Rates, every queue's
    capacity at its filling (``vcap`` where no flow of it was filled), and which queues
    are in a cycle's components."""
    nv = len(vcap)
    active = np.zeros(n, dtype=bool)
    active[pf] = True
    active[pf[vcap[vidx] <= tol]] = False
    active[gone] = False
    on = active[pf]
    graph = sparse.coo_matrix(
        (np.ones(int(on.sum())), (vidx[on], nv + pf[on])), shape=(nv + n, nv + n)
    )
    _, label = connected_components(graph, directed=False)
    has = np.zeros(nv, dtype=bool)
    has[vidx[on]] = True
    comp = np.full(nv, -1)
    comp[has] = np.unique(label[:nv][has], return_inverse=True)[1]
    u = np.where(has, used, 0.0)
    filled = vcap.copy()
    rates = np.zeros(n)

    def fill(queues: np.ndarray) -> None:
        for v in queues:  # what the queues above on its link use now
            above = (vlink == vlink[v]) & (np.arange(nv) < v)
            filled[v] = max(link_cap[v] - float((u[above] * cost[above]).sum()), 0.0)
        sel = on & np.isin(vidx, queues)
        got = _maxmin(pf[sel], vidx[sel], filled, cost, n, tol)
        rates[pf[sel]] = got[pf[sel]]
        u[queues] = np.bincount(vidx[sel], weights=got[pf[sel]], minlength=nv)[queues]

    def by_offers(queues: np.ndarray) -> bool:
        sel = on & np.isin(vidx, queues)
        got = offers_reference(pf[sel], vidx[sel], vlink, link_cap, cost, dep_v, u, tol)
        if got is None:
            return False
        rates[pf[sel]] = got[pf[sel]]
        u[queues] = np.bincount(vidx[sel], weights=got[pf[sel]], minlength=nv)[queues]
        for v in queues:
            above = (vlink == vlink[v]) & (np.arange(nv) < v)
            filled[v] = max(link_cap[v] - float((u[above] * cost[above]).sum()), 0.0)
        return True

    _, loops = queue_relation(comp, vlink)
    in_cycle = np.zeros(nv, dtype=bool)
    for group in queue_groups(comp, vlink):
        if len(group) > 1 or group[0] in loops:
            in_cycle |= np.isin(comp, group)
            queues = np.flatnonzero(np.isin(comp, group))
            if len(queues) <= max_cycle and by_offers(queues):
                continue
        for c in group:  # a cycle's components one after another (a sweep)
            fill(np.flatnonzero(comp == c))
    return rates, filled, in_cycle


def offers_reference(
    pf: np.ndarray, vidx: np.ndarray, vlink: np.ndarray, link_cap: np.ndarray,
    cost: np.ndarray, dep_v: np.ndarray, fixed: np.ndarray, tol: float,
) -> np.ndarray | None:  # fmt: skip
    """``simulator.offer_sweep``: every crossing's offer, from infinity, the links swept
    by depth and each link's queues from the highest, a queue's offer the level at which
    its flows (each at most its least offer elsewhere) fill what the queues above
    leave (``fixed`` use for a queue with no crossing here); damped after ``PLAIN``
    sweeps. Each flow's least offer (0 for flows with no crossing), or None where the
    sweeps do not settle."""
    n = int(pf.max()) + 1 if len(pf) else 0
    offer = np.full(len(pf), np.inf)
    links = sorted(set(vlink[vidx].tolist()), key=lambda lk: (dep_v[vlink == lk][0], lk))
    for s in range(MAX_SWEEPS):
        step, moved = (1.0 if s < PLAIN else DAMPED), 0.0
        for lk in links:
            avail = float(link_cap[vlink == lk][0])
            for v in np.flatnonzero(vlink == lk):
                mine = np.flatnonzero(vidx == v)
                if len(mine) == 0:
                    avail = max(avail - fixed[v] * cost[v], 0.0)
                    continue
                demand = np.array(
                    [  # a flow's offers on other queues
                        offer[(pf == pf[i]) & (vidx != v)].min(initial=np.inf) for i in mine
                    ]
                )
                level, use = _level(np.sort(demand), cost[v], avail)
                new = np.full(len(mine), level)
                damp = (step < 1) & np.isfinite(offer[mine]) & np.isfinite(level)
                new[damp] = offer[mine][damp] + step * (level - offer[mine][damp])
                changed = new != offer[mine]
                if changed.any():
                    moved = max(moved, float(np.abs(new - offer[mine])[changed].max()))
                offer[mine] = new
                avail = max(avail - use, 0.0)
        if moved <= tol:
            rates = np.full(n, np.inf)
            np.minimum.at(rates, pf, offer)
            return np.where(np.isfinite(rates), rates, 0.0)
    return None


def _level(d: np.ndarray, c: float, avail: float) -> tuple[float, float]:
    """The level x where ``sum c min(d, x) = avail`` for demands ``d`` (sorted), and
    the use at it; inf (and every demand's use) where they all fit."""
    m = len(d)
    taken = c * np.r_[0.0, np.cumsum(d)[:-1]]  # what the demands below each one take
    share = (avail - taken) / (c * (m - np.arange(m)))
    over = np.flatnonzero(d > share)
    if len(over) == 0:
        return np.inf, float(c * d.sum())
    return float(share[over[0]]), float(taken[over[0]] + c * (m - over[0]) * share[over[0]])


def queue_relation(comp: np.ndarray, vlink: np.ndarray) -> tuple[list[tuple[int, int]], set]:
    """Pairs (a, b) of components with a queue of a just above a queue of b on a link
    (queues with no component skipped), and the components just above themselves."""
    queues = np.flatnonzero(comp >= 0)
    pairs, loops = [], set()
    for a, b in zip(queues[:-1], queues[1:], strict=True):
        if vlink[a] == vlink[b]:
            if comp[a] == comp[b]:
                loops.add(int(comp[a]))
            else:
                pairs.append((int(comp[a]), int(comp[b])))
    return pairs, loops


def queue_groups(comp: np.ndarray, vlink: np.ndarray) -> list[list[int]]:
    """The components in groups, in order: the strongly connected components (scipy) of
    ``queue_relation``, ordered by the standard library's topological sort, each in the
    order it is swept in (``sweep``)."""
    if (comp < 0).all():
        return []
    nc = int(comp.max()) + 1
    edges, _ = queue_relation(comp, vlink)
    src, dst = np.array([e[0] for e in edges], int), np.array([e[1] for e in edges], int)
    graph = sparse.coo_matrix((np.ones(len(edges)), (src, dst)), shape=(nc, nc))
    _, scc = connected_components(graph, directed=True, connection="strong")
    sorter: TopologicalSorter[int] = TopologicalSorter({int(g): set() for g in scc})
    for a, b in edges:
        if scc[a] != scc[b]:
            sorter.add(int(scc[b]), int(scc[a]))
    groups = [np.flatnonzero(scc == g).tolist() for g in sorter.static_order()]
    return [sweep(g, edges, comp) if len(g) > 1 else g for g in groups]


def sweep(group: list[int], edges: list[tuple[int, int]], comp: np.ndarray) -> list[int]:
    """A cycle's components in the order they are filled: the reverse of the order a
    depth-first search within the cycle leaves them, from the component with the first
    queue, successors in the order of the queues where they follow (``edges``' order)."""
    first = {c: int(np.flatnonzero(comp == c)[0]) for c in group}
    left: list[int] = []
    seen: set[int] = set()

    def visit(c: int) -> None:
        seen.add(c)
        for a, b in edges:
            if a == c and b in first and b not in seen:
                visit(b)
        left.append(c)

    visit(min(group, key=first.__getitem__))
    return left[::-1]


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


def _depths(pf: np.ndarray, pl: np.ndarray) -> np.ndarray:
    """Each link's earliest place on a flow's path (1 for a first hop); crossings come
    in path order."""
    order = np.argsort(pf, kind="stable")
    first = np.searchsorted(pf[order], pf[order])  # where each flow's crossings start
    place = np.empty(len(pf))
    place[order] = np.arange(len(pf)) - first + 1.0
    dep = np.full(int(pl.max()) + 1, np.inf)
    np.minimum.at(dep, pl, place)
    return dep


def newton_reference(
    r: np.ndarray, pf: np.ndarray, vidx: np.ndarray, vlink: np.ndarray, cost: np.ndarray,
    cap: np.ndarray, dep: np.ndarray, wt: np.ndarray,
) -> np.ndarray | None:  # fmt: skip
    """``simulator.newton_end``: every flow's bottleneck read off ``r`` (most upstream
    full prefix where it is largest of its queue, or the most upstream queue below a
    full prefix for a flow at 0), the levels solved as ``v + eps w`` with capacities
    ``c (1 + eps depth)``, kept if a fixed point of that perturbed model."""
    n, nv = len(wt), len(vlink)
    scale = max(float(cap.max()), 1.0)
    same = vlink[:, None] == vlink[None, :]
    below = same & (np.arange(nv)[:, None] <= np.arange(nv)[None, :])  # [u, v]: u in v's prefix

    def prefixes(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        own = np.bincount(vidx, weights=(wt * x)[pf], minlength=nv) * cost
        return own @ below, own

    pre, own = prefixes(r)
    top = np.zeros(nv)
    np.maximum.at(top, vidx, np.where(wt[pf] > 0, r[pf], 0.0))
    full = pre >= cap * (1 - SPOT)
    choice = np.full(n, -1)
    held = np.full(n, -1)
    for f in np.flatnonzero(wt > 0):
        mine = np.flatnonzero(pf == f)
        ok = [i for i in mine if full[vidx[i]] and r[f] >= top[vidx[i]] - SPOT * scale]
        hold = [i for i in mine if pre[vidx[i]] - own[vidx[i]] >= cap[vidx[i]] * (1 - SPOT)]
        if ok:
            choice[f] = vidx[min(ok, key=lambda i: dep[vidx[i]])]
        elif hold and r[f] <= SPOT * scale:
            held[f] = vidx[min(hold, key=lambda i: dep[vidx[i]])]
        else:
            return None
    levels = np.unique(choice[choice >= 0])
    col = np.searchsorted(levels, choice)
    a = np.zeros((len(levels), len(levels)))
    for i in np.flatnonzero(choice[pf] >= 0):
        a[:, col[pf[i]]] += below[vidx[i], levels] * cost[vidx[i]] * wt[pf[i]]
    try:
        x = np.linalg.solve(a, np.stack([cap[levels], cap[levels] * dep[levels]], axis=1))
    except np.linalg.LinAlgError:
        return None
    rv, rw = np.zeros(n), np.zeros(n)
    rv[choice >= 0], rw[choice >= 0] = x[col[choice >= 0]].T
    if not _perturbed_fixed_point(rv, rw, choice, held, prefixes, pf, vidx, cap, dep, wt, scale):
        return None
    return np.where(rv > ZERO * scale, rv, 0.0)  # a level of 0 may solve to 1e-17


def _perturbed_fixed_point(rv, rw, choice, held, prefixes, pf, vidx, cap, dep, wt, scale) -> bool:
    """``newton_reference``'s check, lexicographic in (v, w)."""
    tv, tw = EXACT * scale, EXACT * scale * max(float(dep.max()), 1.0) * 1e3

    def at_most(xv, xw, yv, yw):
        return (xv < yv - tv) | ((xv <= yv + tv) & (xw <= yw + tw))

    live = choice >= 0
    (pv, ov), (pw, ow) = prefixes(rv), prefixes(rw)
    if not (at_most(0.0, 0.0, rv, rw)[live].all() and at_most(pv, pw, cap, cap * dep).all()):
        return False
    ok = True
    for f in np.flatnonzero(live):
        mates = np.unique(pf[(vidx == choice[f]) & (wt[pf] > 0)])
        ok &= bool(at_most(rv[mates], rw[mates], rv[f], rw[f]).all())
    for f in np.flatnonzero(held >= 0):
        h = held[f]
        ok &= bool(at_most(cap[h], cap[h] * dep[h], pv[h] - ov[h], pw[h] - ow[h]))
    return ok
