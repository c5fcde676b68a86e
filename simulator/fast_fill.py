"""Rates of the fast path's flow classes (numba): the allocator's fixed point, touching
only the classes that can move.

A class is a set of flows with the same virtual links: (uplink, band) and (downlink,
receiver band); virtual link ``v = port * q + band``. The allocator's fixed point
(:mod:`simulator.allocator`) is kept: virtual capacities from the rates (a queue gets
what the queues above it leave), exact progressive filling within them, until the
capacities repeat, at most ``MAX_ROUNDS`` rounds, else the worst-queue fallback. What
changes is the work per round:

* A virtual link with no capacity left (``vcap <= tol``) saturates at once, at level 0,
  so its classes get rate 0 whatever their other link does. Only the classes whose two
  links are open (the *active set*) take part in the filling; it is kept across rounds
  and events, and only the classes of links that open or close are looked at.
* Max-min filling is independent in *parts* of the active set that share no link
  (links joined by active classes, kept by union-find: a class that joins unites two
  parts, one that leaves splits none, so a part may be coarser than the connected
  pieces until the parts are found again). A part is filled again only when one of its
  links got other classes (a class joined, left or lost flows) or another capacity
  than the one it was filled in; the other parts keep their rates (the same classes in
  the same capacities: the same rates, up to the ``tol`` within which a joint filling
  freezes links of two parts at one level).
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
from grouper.simulator.progressive import links_of, maxmin


@njit(cache=True)
def _root(par: np.ndarray, v: int) -> int:
    while par[v] != v:
        par[v] = par[par[v]]
        v = par[v]
    return v


# The active set's bookkeeping takes arrays, not the ``Classes`` and ``Net`` tuples:
# numba reference-counts every array of a tuple passed to a call (about 0.4 us for
# ``Net``), more than the work of a call per class or per link here.


@njit(cache=True)
def _join(
    k: int, up: np.ndarray, down: np.ndarray, aset: np.ndarray, apos: np.ndarray,
    a_up: np.ndarray, a_down: np.ndarray, count: np.ndarray, dirty: np.ndarray,
    deg: np.ndarray, par: np.ndarray,
) -> None:  # fmt: skip
    """Class ``k`` joins the active set; its links' parts are united."""
    n = count[0]
    u, d = up[k], down[k]
    aset[n], a_up[n], a_down[n] = k, u, d
    apos[k] = n
    count[0] = n + 1
    count[2] = 1
    dirty[u] = dirty[d] = True
    deg[u] += 1
    deg[d] += 1
    ru, rd = _root(par, u), _root(par, d)
    if ru != rd:
        par[max(ru, rd)] = min(ru, rd)


@njit(cache=True)
def _leave(
    k: int, up: np.ndarray, down: np.ndarray, aset: np.ndarray, apos: np.ndarray,
    a_up: np.ndarray, a_down: np.ndarray, count: np.ndarray, rate: np.ndarray,
    dirty: np.ndarray, deg: np.ndarray, books: np.ndarray,
) -> None:  # fmt: skip
    """Class ``k`` leaves the active set with rate 0 (its part is not split)."""
    i, n = apos[k], count[0] - 1
    last = aset[n]
    aset[i], a_up[i], a_down[i] = last, a_up[n], a_down[n]
    apos[last] = i
    apos[k] = -1
    count[0] = n
    count[2] = 1
    rate[k] = 0.0
    u, d = up[k], down[k]
    dirty[u] = dirty[d] = True
    deg[u] -= 1
    deg[d] -= 1
    books[0] += 1


@njit(cache=True)
def active_remove(c: Classes, net: Net, k: int) -> None:
    _leave(
        k, c.up, c.down, c.aset, c.apos, c.a_up, c.a_down, c.count, c.rate, net.dirty,
        net.deg, net.books,
    )  # fmt: skip


@njit(cache=True)
def _member(net: Net, k: int) -> int:
    """Class ``k``'s index among the members gathered last, or -1."""
    i = net.m_pos[k]
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
    i = _member(net, k)
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
    a_up, a_down = c.a_up, c.a_down
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
                    _leave(k, up, down, aset, apos, a_up, a_down, count, rate, dirty, deg, books)
            elif apos[k] < 0 and mult[k] > 0 and isopen[up[k]] and isopen[down[k]]:
                _join(k, up, down, aset, apos, a_up, a_down, count, dirty, deg, par)


@njit(cache=True)
def _parts(c: Classes, net: Net) -> None:
    """The parts of the active set found again. Between two findings a class that joins
    unites its links' parts and one that leaves changes nothing: a part it split stays
    one, filled as one, which is still exact; once the classes that left since the
    last finding outnumber an eighth of the active set, the parts are found again."""
    par = net.part
    for v in range(len(par)):
        par[v] = v
    for i in range(c.count[0]):
        ru, rd = _root(par, c.a_up[i]), _root(par, c.a_down[i])
        if ru != rd:
            par[max(ru, rd)] = min(ru, rd)
    net.books[0] = 0


@njit(cache=True)
def _gather(c: Classes, net: Net) -> int:
    """The members: the active classes of the parts filled again, in ``aset`` order;
    their flows per link (``net.cnt0``) and per-link lists (``links_of``)."""
    mu, md, mm, mc, sel = net.m_up, net.m_down, net.m_mult, net.m_cls, net.sel
    aset, a_up, a_down, mult, m_pos = c.aset, c.a_up, c.a_down, c.mult, net.m_pos
    n = 0
    for i in range(c.count[0]):  # in order: the class's arrays only for a member
        u = a_up[i]
        if sel[u]:  # a class's two links are in one part
            k = aset[i]
            mu[n], md[n], mm[n], mc[n] = u, a_down[i], mult[k], k
            m_pos[k] = n
            n += 1
    links_of(mu, md, mm, n, len(net.vcap), net)
    net.cnt0[:] = net.cnt
    net.last[:] = net.redo
    net.books[1], net.books[2] = n, 1
    return n


@njit(cache=True)
def _changed(net: Net, mark: bool) -> bool:
    """Whether a link with classes got other classes or another capacity since the last
    filling (a link left with none is dirty only when a class left the active set,
    which refills anyway). With ``mark`` every such link's part is marked to be filled
    again (``net.redo``, by the roots it sets in ``net.root``); else the first one
    found answers."""
    deg, dirty, vcap, filled = net.deg, net.dirty, net.vcap, net.filled
    par, root, redo = net.part, net.root, net.redo
    if mark:
        redo[:] = False
    found = False
    for v in range(len(vcap)):
        if mark:
            root[v] = _root(par, v)
        if deg[v] > 0 and (dirty[v] or vcap[v] != filled[v]):
            if not mark:
                return True
            redo[root[v]] = True
            found = True
    return found


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
def _fill(c: Classes, net: Net) -> None:
    """The active classes' rates in ``net.vcap`` (into ``net.k_rate``) and their use per
    link (``net.used``). Max-min filling is separate in parts of the active set that
    share no link, so only the parts with a link whose capacity or classes changed since
    the last filling are filled again; the others keep their rates and use. When the
    same parts are filled again with the same classes, the members gathered last are
    filled again as they are (``member_lost`` counts them out in place)."""
    if c.count[2]:
        _drop_gone(c, net)
        if 8 * net.books[0] > c.count[0]:
            _parts(c, net)
        c.count[2] = 0
        net.books[2] = 0
    _changed(net, True)
    redo, part = net.redo, net.root
    same = net.books[2] == 1
    for v in range(len(net.vcap)):
        same &= redo[v] == net.last[v]
        net.sel[v] = redo[part[v]]
        if net.sel[v] or net.deg[v] == 0:
            net.m_used[v] = 0.0
    if same:
        n = net.books[1]
        net.cnt[:] = net.cnt0
    else:
        n = _gather(c, net)
    maxmin(net.m_up, net.m_down, net.m_mult, n, net.vcap, net)
    for i in range(n):
        net.k_rate[net.m_cls[i]] = max(net.m_rate[i], 0.0)
    net.filled[:] = net.vcap  # a part kept had these capacities
    net.used[:] = net.m_used[: len(net.used)]
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
def _used(c: Classes, net: Net, classes: np.ndarray, n: int) -> None:
    net.used[:] = 0.0
    for i in range(n):
        k = classes[i]
        x = c.rate[k] * c.mult[k]
        net.used[c.up[k]] += x
        net.used[c.down[k]] += x


@njit(cache=True)
def _settled(net: Net, tol: float) -> bool:
    for v in range(len(net.vcap)):
        if net.vnum[v] > 0 and abs(net.again[v] - net.vcap[v]) > tol + 1e-9 * abs(net.vcap[v]):
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
        if c.count[2] or _changed(net, False):
            _fill(c, net)  # else the same members in the same capacities: the same rates
        _virtual_capacity(net.used, net.cap, q, net.again)
        if _settled(net, tol):
            n = c.count[0]
            for i in range(n):
                c.rate[c.aset[i]] = net.k_rate[c.aset[i]]
            c.pos[:n] = c.aset[:n]
            c.count[1] = n
            return True
        net.vcap[:] = net.again
    _fallback(c, net, q)
    return False


@njit(cache=True)
def by_worst_queue(
    up: np.ndarray, down: np.ndarray, q: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The classes sorted by worst queue (counting sort), where each queue's start, and
    the (up, down) ports of each in that order: fixed between plans, so the fallback
    need not sort, and reads the ports in order."""
    start = np.zeros(q + 1, np.int64)
    for k in range(len(up)):
        start[max(up[k] % q, down[k] % q) + 1] += 1
    start = np.cumsum(start)
    cur = start[:-1].copy()
    order = np.empty(len(up), np.int64)
    ports = np.empty((2, len(up)), np.int64)
    for k in range(len(up)):
        b = max(up[k] % q, down[k] % q)
        order[cur[b]] = k
        ports[0, cur[b]], ports[1, cur[b]] = up[k] // q, down[k] // q
        cur[b] += 1
    return order, start, ports


@njit(cache=True)
def _fallback(c: Classes, net: Net, q: int) -> None:
    """A priority cycle: every class at its worst queue (``allocate``'s fallback):
    level by level, max-min over ports in what the levels above left. A class with a
    port left with no capacity (``tol``) gets 0 without taking part, as in the active
    set (the allocator gives it the tiny level at which that port saturates)."""
    residual = net.cap[::q].copy()
    tol = net.tol[0]
    mu, md, mm, members = net.m_up, net.m_down, net.m_mult, net.m_cls
    worst, ports, mult = net.worst, net.worst_ports, c.mult
    n_pos = 0
    for b in range(q):
        n = 0
        for j in range(net.worst_start[b], net.worst_start[b + 1]):
            pu, pd = ports[0, j], ports[1, j]
            if residual[pu] > tol and residual[pd] > tol and mult[worst[j]] > 0:
                k = worst[j]
                mu[n], md[n], mm[n], members[n] = pu, pd, mult[k], k
                n += 1
        if n == 0:
            continue
        links_of(mu, md, mm, n, len(residual), net)
        net.m_used[: len(residual)] = 0.0
        maxmin(mu, md, mm, n, residual, net)
        for p in range(len(residual)):
            residual[p] = max(residual[p] - net.m_used[p], 0.0)
        for i in range(n):
            k = members[i]
            c.rate[k] = net.m_rate[i]
            if c.rate[k] > 0.0:
                c.pos[n_pos] = k
                n_pos += 1
    c.count[1] = n_pos
    c.count[2] = 1  # the workspace was the fallback's: every part is filled again
    net.dirty[:] = True
    net.books[2] = 0
    _used(c, net, c.pos, n_pos)
