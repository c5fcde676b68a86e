"""Rates of the fast path's flow classes (numba): the allocator's fixed point, touching
only the classes that can move.

A class is a set of flows with the same virtual links: (uplink, band) and (downlink,
receiver band); virtual link ``v = port * q + band``. The allocator's rounds
(:mod:`simulator.allocator`) are kept: the open queues by the last round's use, their
parts filled in the order of their queues (a part's capacities from the rates the
parts above it just got), the parts that cannot be ordered together last, until every
queue's capacity is the one it was filled in, at most ``MAX_ROUNDS`` rounds, else the
worst-queue fallback. What changes is the work per round:

* A virtual link with no capacity left (``vcap <= tol``) saturates at once, at level 0,
  so its classes get rate 0 whatever their other link does. Only the classes whose two
  links are open (the *active set*) take part in the filling; it is kept across rounds
  and events, and only the classes of links that open or close are looked at.
* The *parts* are the allocator's components or unions of them: links joined by
  active classes, kept by union-find (a class that joins unites two parts; one that
  leaves splits none). They are found again once the classes that left outnumber an
  eighth of the active set, and whenever some parts cannot be ordered, where they must
  be the components exactly. A union of components that can be ordered is filled as
  one: the same rates up to the ``tol`` within which a joint filling freezes links of
  two components at one level. The members are gathered part by part in the parts'
  order (``_order``) when a class joined (or after the fallback), else kept; a member
  that leaves stays with no flows. A part is filled again only when one of its links
  got other classes (a class joined, left or lost flows) or another capacity than the
  one it was filled in; the other parts keep their rates.
* The filling itself (``progressive``) takes the next link to saturate from a heap of
  saturation levels: a round costs the refilled classes and the links, not every class.

The levels are the allocator's (the same arithmetic up to rounding, within the
``tol`` it uses); classes left out get 0 where the allocator gives them the tiny level
at which a closed link saturates (at most ``tol`` per flow).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from grouper.simulator.allocator import MAX_ROUNDS
from grouper.simulator.fast_classes import Classes, Net
from grouper.simulator.fast_fallback import fallback
from grouper.simulator.progressive import links_of, maxmin
from grouper.simulator.queue_order import component_order, find_root

# The active set's bookkeeping takes arrays, not the ``Classes`` and ``Net`` tuples:
# numba reference-counts every array of a tuple passed to a call (about 0.4 us for
# ``Net``), more than the work of a call per class or per link here.


@njit(cache=True)
def _join(
    k: int, up: np.ndarray, down: np.ndarray, mult: np.ndarray, aset: np.ndarray,
    apos: np.ndarray, a_up: np.ndarray, a_down: np.ndarray, a_mult: np.ndarray,
    count: np.ndarray, dirty: np.ndarray, deg: np.ndarray, par: np.ndarray,
) -> None:  # fmt: skip
    """Class ``k`` joins the active set; its links' parts are united."""
    n = count[0]
    u, d = up[k], down[k]
    aset[n], a_up[n], a_down[n], a_mult[n] = k, u, d, mult[k]
    apos[k] = n
    count[0] = n + 1
    count[2] = 1
    dirty[u] = dirty[d] = True
    deg[u] += 1
    deg[d] += 1
    ru, rd = find_root(par, u), find_root(par, d)
    if ru != rd:
        par[max(ru, rd)] = min(ru, rd)


@njit(cache=True)
def _leave(
    k: int, up: np.ndarray, down: np.ndarray, aset: np.ndarray, apos: np.ndarray,
    a_up: np.ndarray, a_down: np.ndarray, a_mult: np.ndarray, m_of: np.ndarray,
    count: np.ndarray, rate: np.ndarray, dirty: np.ndarray, deg: np.ndarray,
    books: np.ndarray, m_mult: np.ndarray, m_cls: np.ndarray, cnt0: np.ndarray,
) -> None:  # fmt: skip
    """Class ``k`` leaves the active set with rate 0 (its part is not split). A member
    of the last gathering stays there with no flows (it takes no capacity), so the
    members need not be gathered again."""
    i, n = apos[k], count[0] - 1
    j = m_of[i]
    if books[2] and 0 <= j < books[1] and m_cls[j] == k:
        cnt0[up[k]] -= m_mult[j]
        cnt0[down[k]] -= m_mult[j]
        m_mult[j] = 0
    else:
        count[2] = 1
    last = aset[n]
    aset[i], a_up[i], a_down[i], a_mult[i], m_of[i] = last, a_up[n], a_down[n], a_mult[n], m_of[n]
    apos[last] = i
    apos[k] = -1
    count[0] = n
    rate[k] = 0.0
    u, d = up[k], down[k]
    dirty[u] = dirty[d] = True
    deg[u] -= 1
    deg[d] -= 1
    books[0] += 1


@njit(cache=True)
def active_remove(c: Classes, net: Net, k: int) -> None:
    _leave(
        k, c.up, c.down, c.aset, c.apos, c.a_up, c.a_down, c.a_mult, net.m_of, c.count,
        c.rate, net.dirty, net.deg, net.books, net.m_mult, net.m_cls, net.cnt0,
    )  # fmt: skip


@njit(cache=True)
def _member(c: Classes, net: Net, k: int) -> int:
    """Class ``k``'s index among the members gathered last, or -1."""
    if c.apos[k] < 0:
        return -1
    i = net.m_of[c.apos[k]]
    if net.books[2] and 0 <= i < net.books[1] and net.m_cls[i] == k:
        return i
    return -1


@njit(cache=True)
def member_lost(c: Classes, net: Net, k: int, lost: int) -> None:
    """Active class ``k`` lost ``lost`` flows: its part is filled again. A member of the
    last gathering is counted out in place (one left with no flows stays in the active
    set, taking no capacity, until the active set next changes: ``net.gone``); another
    class left with none leaves the active set."""
    net.dirty[c.up[k]] = net.dirty[c.down[k]] = True
    c.a_mult[c.apos[k]] = c.mult[k]
    i = _member(c, net, k)
    if i >= 0:
        net.m_mult[i] -= lost
        net.cnt0[c.up[k]] -= lost
        net.cnt0[c.down[k]] -= lost
        if c.mult[k] == 0:
            net.gone[net.books[3]] = k
            net.books[3] += 1
    elif c.mult[k] == 0:
        active_remove(c, net, k)


@njit(cache=True)
def _toggle(c: Classes, net: Net, tol: float) -> None:
    """Open and close links by ``vcap`` and keep the active set in step."""
    up, down, aset, apos, count, mult, rate = c.up, c.down, c.aset, c.apos, c.count, c.mult, c.rate
    a_up, a_down, a_mult, m_of = c.a_up, c.a_down, c.a_mult, net.m_of
    isopen, vcap, dirty, deg = net.isopen, net.vcap, net.dirty, net.deg
    par, books = net.part, net.books
    vstart, vcls, flips = net.vstart, net.vcls, net.work[2]
    nf = 0
    for v in range(len(vcap)):
        o = vcap[v] > tol
        if o != isopen[v]:
            isopen[v] = o
            flips[nf] = v
            nf += 1
    for i in range(nf):
        v = flips[i]
        for j in range(vstart[v], vstart[v + 1]):
            k = vcls[j]
            if not isopen[v]:
                if apos[k] >= 0:
                    _leave(
                        k, up, down, aset, apos, a_up, a_down, a_mult, m_of, count, rate,
                        dirty, deg, books, net.m_mult, net.m_cls, net.cnt0,
                    )  # fmt: skip
            elif apos[k] < 0 and mult[k] > 0 and isopen[up[k]] and isopen[down[k]]:
                _join(k, up, down, mult, aset, apos, a_up, a_down, a_mult, count, dirty, deg, par)


@njit(cache=True)
def _parts(c: Classes, net: Net) -> None:
    """The parts of the active set found again (union-find over the active classes'
    links). Between two findings a class that joins unites its links' parts and one that
    leaves changes nothing: a part it split stays one, filled as one, which gives the
    same rates as long as the parts can be ordered; ``_fill`` finds them again once the
    classes that left outnumber an eighth of the active set, and whenever some parts
    cannot be ordered (coarse parts could be what makes them so)."""
    par = net.part
    for v in range(len(par)):
        par[v] = v
    for i in range(c.count[0]):
        ru, rd = find_root(par, c.a_up[i]), find_root(par, c.a_down[i])
        if ru != rd:
            par[max(ru, rd)] = min(ru, rd)
    net.books[0] = 0


@njit(cache=True)
def _drop_gone(c: Classes, net: Net) -> None:
    """The members left with no flows leave the active set as a scan of it from the
    front would remove them: by position, each removal moving the last entry into the
    hole, which goes too when it is one of them (every active class with no flows is in
    ``net.gone``). Sorting the list keeps this O(p log p) for p of them."""
    gone, apos, mult, aset = net.gone, c.apos, c.mult, c.aset
    n = net.books[3]
    net.books[3] = 0
    if n == 0:
        return
    todo = gone[:n][np.argsort(apos[gone[:n]])]
    for k in todo:
        i = apos[k]
        if i < 0:  # left already (a closed link, or moved here and dropped below)
            continue
        while i < c.count[0] and mult[aset[i]] == 0:
            active_remove(c, net, aset[i])


@njit(cache=True)
def _order(c: Classes, net: Net) -> None:
    """The parts in the order of their queues (``component_order``: every queue after
    the queues above it on its port), the active classes gathered part by part in that
    order (members ``b_start[i]..b_start[i+1]`` of the i-th part) and each part's links
    (``b_links``), and the per-link member lists (``links_of``), kept until a class
    joins, the fallback ran, or the parts are found again."""
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
    order, ordered = component_order(comp, net.port, nc)
    at = np.empty(nc, np.int64)
    for i in range(nc):
        at[order[i]] = i
    bs, ls = net.b_start, net.b_lstart
    bs[: nc + 2] = 0
    ls[: nc + 2] = 0
    for i in range(c.count[0]):
        bs[at[comp[c.a_up[i]]] + 2] += 1
    for v in range(nv):
        if comp[v] >= 0:
            ls[at[comp[v]] + 2] += 1
    for i in range(2, nc + 2):
        bs[i] += bs[i - 1]
        ls[i] += ls[i - 1]
    mu, md, mm, mc, m_of = net.m_up, net.m_down, net.m_mult, net.m_cls, net.m_of
    for i in range(c.count[0]):  # bs[p + 1] is the next slot of part p: at the end, its end
        p = at[comp[c.a_up[i]]]
        j = bs[p + 1]
        k = c.aset[i]
        mu[j], md[j], mm[j], mc[j] = c.a_up[i], c.a_down[i], c.a_mult[i], k
        m_of[i] = j
        bs[p + 1] = j + 1
    for v in range(nv):
        if comp[v] >= 0:
            p = at[comp[v]]
            net.b_links[ls[p + 1]] = v
            ls[p + 1] += 1
    n = c.count[0]
    links_of(mu, md, mm, n, net.b_links[: ls[nc]], net)  # kept until the next gathering
    net.cnt0[:] = net.cnt
    net.books[1], net.books[2], net.books[4], net.books[5] = n, 1, nc, ordered


@njit(cache=True)
def _capacity(v: int, q: int, cap: np.ndarray, used: np.ndarray) -> float:
    """What queue ``v`` gets: its port's capacity less what the queues above it use
    (``_virtual_capacity``'s arithmetic, term by term)."""
    above = 0.0
    for w in range(v - v % q, v):
        above += used[w]
    return max(cap[v] - above, 0.0)


@njit(cache=True)
def _fill_parts(c: Classes, net: Net, q: int, lo: int, hi: int) -> None:
    """Parts ``lo..hi-1`` (in ``_order``'s order) filled together in the capacities the
    queues above them leave now (``net.used``); a part whose links kept their classes
    and capacities since its last filling keeps its rates when filled alone."""
    links, ls, used, filled, dirty = net.b_links, net.b_lstart, net.used, net.filled, net.dirty
    again = False
    for j in range(ls[lo], ls[hi]):
        v = links[j]
        if net.deg[v] > 0:  # else no class of it is active (``_fill``)
            x = _capacity(v, q, net.cap, used)
            again |= dirty[v] or x != filled[v]
            filled[v] = x
    if not again:
        return
    s, e = net.b_start[lo], net.b_start[hi]
    for j in range(ls[lo], ls[hi]):
        net.m_used[links[j]] = 0.0
        net.cnt[links[j]] = net.cnt0[links[j]]
    maxmin(net.m_up, net.m_down, net.m_mult, s, e, filled, links[ls[lo] : ls[hi]], net)
    for i in range(s, e):
        net.k_rate[net.m_cls[i]] = max(net.m_rate[i], 0.0)
    for j in range(ls[lo], ls[hi]):
        if net.deg[links[j]] > 0:
            used[links[j]] = net.m_used[links[j]]


@njit(cache=True)
def _fill(c: Classes, net: Net, q: int) -> None:
    """One round over the active classes, queues in order: each part filled in the
    capacities the parts above it just left, the parts that cannot be ordered together
    last, in what the last round's rates leave them (``allocator_kernel._ordered_round``).
    The members are gathered again only when needed (``_order``). Sets
    ``net.filled`` (each link's capacity at this round's filling) and ``net.used``."""
    _drop_gone(c, net)
    books = net.books
    if c.count[2] or (books[5] < books[4] and books[0] > 0):
        if 8 * books[0] > c.count[0]:
            _parts(c, net)
        _order(c, net)
        if books[5] < books[4] and books[0] > 0:
            _parts(c, net)  # parts that cannot be ordered may be coarse ones: be exact
            _order(c, net)
        c.count[2] = 0
    for v in range(len(net.vcap)):
        if net.deg[v] == 0:
            net.used[v] = 0.0
            net.filled[v] = net.vcap[v]
    nc, ordered = net.books[4], net.books[5]
    for i in range(ordered):
        _fill_parts(c, net, q, i, i + 1)
    if ordered < nc:
        _fill_parts(c, net, q, ordered, nc)
    net.dirty[:] = False


@njit(cache=True)
def _virtual_capacity(used: np.ndarray, cap: np.ndarray, q: int, out: np.ndarray) -> None:
    """What every queue gets: its port's capacity less what the queues above use."""
    for p in range(len(used) // q):
        above = 0.0
        for b in range(q):
            v = p * q + b
            out[v] = max(cap[v] - above, 0.0)
            above += used[v]


@njit(cache=True)
def _settled(net: Net, tol: float) -> bool:
    for v in range(len(net.vcap)):
        x = net.filled[v]
        if net.vnum[v] > 0 and abs(net.again[v] - x) > tol + 1e-9 * abs(x):
            return False
    return True


@njit(cache=True)
def allocate_classes(c: Classes, net: Net, q: int, tol: float) -> bool:
    """Every class's rate (``c.rate``), warm-started from ``net.used``; the classes with
    a rate in ``c.pos``, their use in ``net.used``. False when the fixed point did not
    settle and the worst-queue fallback decided (as ``allocate``)."""
    for i in range(c.count[1]):
        c.rate[c.pos[i]] = 0.0
    _virtual_capacity(net.used, net.cap, q, net.vcap)
    for _ in range(MAX_ROUNDS):
        _toggle(c, net, tol)
        _fill(c, net, q)
        _virtual_capacity(net.used, net.cap, q, net.again)
        if _settled(net, tol):
            n = c.count[0]
            for i in range(n):
                c.rate[c.aset[i]] = net.k_rate[c.aset[i]]
            c.pos[:n] = c.aset[:n]
            c.count[1] = n
            return True
        net.vcap[:] = net.again
    fallback(c, net, q)
    return False
