"""Rates of the fast path's flow classes (numba): the allocator's fixed point, touching
only the classes that can move.

A class is a set of flows with the same virtual links: (uplink, band) and (downlink,
receiver band); virtual link ``v = port * q + band``. The allocator's rounds
(:mod:`simulator.allocator`) are kept: the open queues by the last round's use, their
parts filled in the order of their queues (a part's capacities from the rates the
parts above it just got), the parts of a cycle solved together by offers
(``offer_sweep``; past its bounds, filled in the order of its sweep), the use of a
cycle's queues extrapolated after every round (:mod:`simulator.anderson`), until
every queue's capacity is the one it was filled in; the exact end on the piece they
reached (``fast_exact``) after every ``EXACT_EVERY`` rounds; after ``MAX_ROUNDS``, the
worst-queue fallback. What
changes is the work per round:

* A virtual link with no capacity left (``vcap <= tol``) saturates at once, at level 0,
  so its classes get rate 0 whatever their other link does. Only the classes whose two
  links are open (the *active set*) take part in the filling; it is kept across rounds
  and events, each link's active classes first on its list (``fast_active``: a class
  joins or leaves in O(1)), and only the classes of links that open or close are looked
  at.
* The *parts* are the allocator's components or unions of them: links joined by
  active classes, kept by union-find (a class that joins unites two parts; one that
  leaves splits none). They are ordered again (``_order``, work in the links) when a
  class joined two parts or reached a link no part had; found again once the classes
  that left outnumber an eighth of the active set, and whenever a class left a part in
  a cycle, where they must be the components exactly. A
  union of components that can be ordered is filled as one: the same rates up to the
  ``tol`` within which a joint filling freezes links of two components at one level.
  A part is filled again, from its links' lists, only when one of its links got other
  classes (a class joined, left or lost flows), another capacity than the one it
  was filled in, or a move of its use (the extrapolation); the other parts keep their
  rates.
* The filling itself (``progressive``) takes the next link to saturate from a heap of
  saturation levels: a round costs the refilled classes and the links, not every class.

The levels are the allocator's (the same arithmetic up to rounding, within the
``tol`` it uses); classes left out get 0 where the allocator gives them the tiny level
at which a closed link saturates (at most ``tol`` per flow).
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.allocator import EXACT_EVERY
from grouper.simulator.anderson import REACH, REACH_LATE, extrapolate, history
from grouper.simulator.fast_active import drop_gone, toggle
from grouper.simulator.fast_classes import Classes, Net, queue_layout, virtual_capacity
from grouper.simulator.fast_exact import exact_end
from grouper.simulator.fast_fallback import drop_fallback_rates, fallback
from grouper.simulator.kernel import kernel
from grouper.simulator.offer_sweep import MAX_SWEEPS, offer_sweep, rates_of
from grouper.simulator.progressive import maxmin, space
from grouper.simulator.queue_order import component_order, find_root


@kernel
def _parts(c: Classes, net: Net) -> None:
    """The parts of the active set found again (union-find over the active classes'
    links). Between two findings a class that joins unites its links' parts and one that
    leaves changes nothing: a part it split stays one, filled as one, which gives the
    same rates as long as the parts can be ordered; ``_fill`` finds them again once the
    classes that left outnumber an eighth of the active set, and whenever some parts
    are in cycles (coarse parts could be what makes them so)."""
    par, a_up, a_down = net.part, c.a_up, c.a_down
    for v in range(len(par)):
        par[v] = v
    for i in range(c.count[0]):
        ru, rd = find_root(par, a_up[i]), find_root(par, a_down[i])
        if ru != rd:
            par[max(ru, rd)] = min(ru, rd)
    net.books[0] = 0


@kernel
def _unordered_parts(net: Net) -> None:
    """The parts in cycles (``net.l_cyc``) found again exactly, from their links' active
    classes alone: the parts in order stay as they are (coarse ones are filled as one,
    which is exact for them), so this costs the classes of the parts in cycles, not the
    whole active set. ``books[0]`` is left as it is: the parts in order may still be
    coarse."""
    par, l_cyc, vstart, aend, lother = net.part, net.l_cyc, net.vstart, net.aend, net.lother
    for v in range(len(par)):
        if l_cyc[v]:
            par[v] = v
    for v in range(len(par)):
        if not l_cyc[v]:
            continue
        for e in range(vstart[v], aend[v]):
            o = lother[e]
            if o > v:  # each class once: from its lower link
                ru, ro = find_root(par, v), find_root(par, o)
                if ru != ro:
                    par[max(ru, ro)] = min(ru, ro)


@kernel
def _order(c: Classes, net: Net) -> None:
    """The parts in the order of their queues (``component_order``: every queue after
    the queues above it on its port) and each part's links (``b_links`` from
    ``b_lstart[i]`` for the i-th, ``l_part``): work in the links, not the classes."""
    par, deg, nv = net.part, net.deg, len(net.vcap)
    comp = np.full(nv, -1, np.int64)
    ids = np.full(nv, -1, np.int64)
    nc = 0
    for v in range(nv):
        if deg[v] > 0:
            r = find_root(par, v)
            if ids[r] < 0:
                ids[r] = nc
                nc += 1
            comp[v] = ids[r]
    order, gstart, cyc = component_order(comp, net.port, nc)
    at = np.empty(nc, np.int64)
    for i in range(nc):
        at[order[i]] = i
    ng = len(gstart) - 1
    in_cycle = np.zeros(nc, np.bool_)  # by place in the order
    gend = net.b_gend
    gend[: nc + 1] = -1
    for g in range(ng):
        in_cycle[gstart[g] : gstart[g + 1]] = cyc[g]
        if cyc[g]:
            gend[gstart[g]] = gstart[g + 1]
    ls, l_part, l_cyc, b_links = net.b_lstart, net.l_part, net.l_cyc, net.b_links
    ls[: nc + 2] = 0
    for v in range(nv):
        l_part[v] = at[comp[v]] if comp[v] >= 0 else -1
        l_cyc[v] = comp[v] >= 0 and in_cycle[l_part[v]]
        if comp[v] >= 0:
            ls[l_part[v] + 2] += 1
    for i in range(2, nc + 2):
        ls[i] += ls[i - 1]
    for v in range(nv):  # ls[p + 1] is the next place of part p: at the end, its end
        if comp[v] >= 0:
            b_links[ls[l_part[v] + 1]] = v
            ls[l_part[v] + 1] += 1
    net.books[1], net.books[3], net.books[4], net.books[5] = 0, nc, ng, cyc.sum()


@kernel(inline="always")
def _capacity(v: int, q: int, cap: np.ndarray, used: np.ndarray) -> float:
    """What queue ``v`` gets: its port's capacity less what the queues above it use
    (``virtual_capacity``'s arithmetic, term by term). Inlined where it is used (numba
    ``inline="always"``): a call per link counted its arrays' references."""
    above = 0.0
    for w in range(v - v % q, v):
        above += used[w]
    return max(cap[v] - above, 0.0)


@kernel
def _capacities(
    links: np.ndarray, deg: np.ndarray, cap: np.ndarray, used: np.ndarray,
    filled: np.ndarray, dirty: np.ndarray, q: int,
) -> bool:  # fmt: skip
    """A part's links (``links``) get the capacities the queues above them leave now
    (``used``) in ``filled``; True when the part must be filled again: a link got other
    classes, another capacity than it was filled in, or a move of its use. Else it
    keeps its rates. Called for every part of every round, it takes the seven arrays
    it reads: numba counts a reference to every array of a tuple passed to a call."""
    again = False
    for v in links:
        if deg[v] > 0:  # else no class of it is active (``_fill``)
            x = _capacity(v, q, cap, used)
            again |= dirty[v] or x != filled[v]
            filled[v] = x
    return again


@kernel
def _fill_part(
    rate: np.ndarray, links: np.ndarray, deg: np.ndarray, used: np.ndarray,
    filled: np.ndarray, cnt0: np.ndarray, lists: tuple, ws: tuple,
) -> None:  # fmt: skip
    """A part (its ``links``) filled in its capacities (``filled``)."""
    cnt, m_used = ws[0], ws[5]
    for v in links:
        m_used[v] = 0.0
        cnt[v] = cnt0[v]
    maxmin(rate, filled, links, lists, ws)
    for v in links:
        if deg[v] > 0:
            used[v] = m_used[v]


@kernel
def _fill(c: Classes, net: Net, q: int) -> None:
    """One round over the active classes, queues in order: each part filled in the
    capacities the parts above it just left (the parts of a cycle in the order of its
    sweep: the last round's use of those after it counts) as in
    ``allocator_kernel._ordered_round``.
    The parts are found and ordered again only when needed (``fast_active``). Sets
    ``net.filled`` (each link's capacity at this round's filling) and ``net.used``.
    The arrays the loops read are taken off the tuples before them (an array read off
    a tuple inside a loop is reference-counted at every pass)."""
    books = net.books
    if books[2]:
        drop_gone(c, net)
    if c.count[2] or books[1] > 0:
        if 8 * books[0] > c.count[0]:
            _parts(c, net)
        _order(c, net)
        if books[5] > 0 and books[0] > 0:
            _unordered_parts(net)  # they may be coarse ones: be exact
            _order(c, net)
        c.count[2] = 0
    deg, cap, used, filled, vcap = net.deg, net.cap, net.used, net.filled, net.vcap
    dirty, cnt0, rate = net.dirty, net.cnt0, c.a_rate
    for v in range(len(vcap)):
        if deg[v] == 0:
            used[v] = 0.0
            filled[v] = vcap[v]
    # members by their place in the active set: the rates go beside them (``a_rate``)
    lists = (net.vstart, net.aend, net.lapos, net.lother, net.lmult)
    ws, links, ls, gend = space(net), net.b_links, net.b_lstart, net.b_gend
    p, force, max_cycle = 0, -1, net.max_cycle[0]  # parts before ``force``: filled anyway
    while p < books[3]:
        e = gend[p]
        if e > p and ls[e] - ls[p] <= max_cycle:
            cycle = links[ls[p] : ls[e]]
            if not _capacities(cycle, deg, cap, used, filled, dirty, q):
                p = e  # a cycle whose queues kept their capacities keeps its rates
                continue
            if _sweep_cycle(c, net, cycle, q):
                p = e
                continue
            force = e  # the sweeps did not settle: its parts one after another
        part = links[ls[p] : ls[p + 1]]
        if _capacities(part, deg, cap, used, filled, dirty, q) or p < force:
            _fill_part(rate, part, deg, used, filled, cnt0, lists, ws)
        p += 1
    dirty[:] = False


@kernel
def _sweep_cycle(c: Classes, net: Net, links: np.ndarray, q: int) -> bool:
    """The active classes of a cycle's parts (on ``links``) solved by offers from
    infinity (``offer_sweep``) in what the queues above leave; their rates beside the
    active set, the use of their queues and the capacities it leaves (``used``,
    ``filled``). False (nothing changed) where the sweeps do not settle."""
    vstart, aend, lcls, lapos, lmult = net.vstart, net.aend, net.lcls, net.lapos, net.lmult
    up, down = c.up, c.down
    m = 0
    for v in links:
        for e in range(vstart[v], aend[v]):
            m += up[lcls[e]] == v
    cf, cv = np.empty(2 * m, np.int64), np.empty(2 * m, np.int64)
    wt, at = np.empty(m), np.empty(m, np.int64)
    j = 0
    for v in links:
        for e in range(vstart[v], aend[v]):
            k = lcls[e]
            if up[k] == v:  # each class once, from its uplink
                cf[2 * j], cf[2 * j + 1] = j, j
                cv[2 * j], cv[2 * j + 1] = v, down[k]
                wt[j], at[j] = lmult[e], lapos[e]
                j += 1
    cap, used, nv = net.cap, net.used, len(net.cap)
    lfirst, vdep = queue_layout(nv, q)
    offer = np.full(2 * m, np.inf)
    if offer_sweep(cf, cv, wt, lfirst, cap, np.ones(nv), vdep, used, offer, MAX_SWEEPS,
                   net.tol[0]) < 0:  # fmt: skip
        return False
    got = np.empty(m)
    rates_of(cf, wt, offer, got)
    for v in links:
        used[v] = 0.0
    a_rate = c.a_rate
    for i in range(m):
        a_rate[at[i]] = got[i]
        used[cv[2 * i]] += got[i] * wt[i]
        used[cv[2 * i + 1]] += got[i] * wt[i]
    filled = net.filled
    for v in links:
        filled[v] = _capacity(v, q, cap, used)
    return True


@kernel
def _settled(vnum: np.ndarray, filled: np.ndarray, again: np.ndarray, tol: float) -> bool:
    """Every queue with a class that has flows has the capacity it was filled in."""
    for v in range(len(filled)):
        x = filled[v]
        if vnum[v] > 0 and abs(again[v] - x) > tol + 1e-9 * abs(x):
            return False
    return True


@kernel
def class_rates(c: Classes) -> np.ndarray:
    """Every class's rate after the last allocation, by class: beside the active set
    (``a_rate``) when it settled, by class (``rate``) when it fell back."""
    out, aset, a_rate = c.rate.copy(), c.aset, c.a_rate
    if not c.count[3]:
        for i in range(c.count[0]):
            out[aset[i]] = a_rate[i]
    return out


@kernel
def allocate_classes(c: Classes, net: Net, q: int, tol: float) -> bool:
    """Every class's rate (``class_rates``), warm-started from ``net.used``; their use
    in ``net.used``. True when the fixed point settled: the rates are then beside the
    active set (``a_rate``; ``count[1]`` of them), and every other class has rate 0.
    False when it did not and the worst-queue fallback decided (as ``allocate_settled``): the
    rates are then by class (``rate``), the classes with one in ``pos``.

    The filling writes the active classes' rates in place (a part not filled again
    keeps its classes' rates; a class that leaves gets 0), so a settled allocation
    copies none; only a fallback's rates, given to classes by worst queue, are taken
    back first (it marked every link dirty: every part is filled again)."""
    used, cap, vcap, again = net.used, net.cap, net.vcap, net.again
    if c.count[3]:  # after a fallback: from the rounds' last filling, not its rates
        drop_fallback_rates(c)
        c.count[3] = 0
        used[:] = net.restart
    virtual_capacity(used, cap, q, vcap)
    xs, gs, mask, held = history(0)
    start = np.empty(len(used))
    for k in range(net.max_rounds[0]):
        toggle(c, net, tol)
        start[:] = used
        _fill(c, net, q)
        virtual_capacity(used, cap, q, again)
        if _settled(net.vnum, net.filled, again, tol):
            c.count[1] = c.count[0]  # the active set has the rates
            return True
        if k % EXACT_EVERY == EXACT_EVERY - 1 and exact_end(c, net, q, tol):  # the piece
            c.count[1] = c.count[0]
            return True
        # a link whose use moved is filled again
        if len(mask) != len(used):
            xs, gs, mask, held = history(len(used))
        reach = REACH if k < EXACT_EVERY else REACH_LATE
        extrapolate(used, start, net.l_cyc, xs, gs, mask, held, cap, tol, net.dirty, reach)
        virtual_capacity(used, cap, q, again)
        vcap[:] = again
    fallback(c, net, q)
    c.count[3] = 1
    return False
