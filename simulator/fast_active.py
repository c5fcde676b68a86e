"""The fast path's active set (numba): the classes whose two links are open, kept on
each link's list as they join and leave.

Links open and close at nearly every event (a queue above frees or takes its port), so
classes join and leave by the hundred per allocation (FB2010 online, grouper: 27
million joins over 95,000 allocations). Each link's classes lie together in ``lcls``
(from ``vstart[v]``), the active ones first (to ``aend[v]``): a class joins or leaves
by a swap on each of its two links, O(1), and the filling reads a link's members
there (``fast_fill``). ``cnt0`` keeps each link's flows of active classes.

The parts (links joined by active classes, union-find) and their order are found
again (``fast_fill._order``, work in the links) only when a class joins two parts or
reaches a link no part had (``count[2]``). A class that leaves splits no part; the
pieces of a part that can be ordered can be too, so only a leave inside a part in a
cycle (``books[1]``, ``l_cyc``) asks for the parts to be found again exactly.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.fast_classes import Classes, Net
from grouper.simulator.kernel import kernel
from grouper.simulator.queue_order import find_root

# A call that passes arrays costs a reference count up and down per array (numba's
# NRT_incref/decref: 16% of baraat's run when each class's join and leave was a call
# of 18 arrays), so the kernels below take a link's whole batch of classes per call,
# and do each class's work inline (the two swaps of a join and of a leave are written
# out in each: a helper called per class would count its arrays again).


@kernel
def _join_all(
    ks: np.ndarray, n: int, up: np.ndarray, down: np.ndarray, mult: np.ndarray,
    aset: np.ndarray, apos: np.ndarray, a_up: np.ndarray, a_down: np.ndarray,
    a_mult: np.ndarray, count: np.ndarray, par: np.ndarray, aend: np.ndarray,
    cnt0: np.ndarray, deg: np.ndarray, l_part: np.ndarray, dirty: np.ndarray,
    lcls: np.ndarray, lother: np.ndarray, lmult: np.ndarray, kpos: np.ndarray,
    a_rate: np.ndarray, a_served: np.ndarray, a_least: np.ndarray, a_slack: np.ndarray,
    served: np.ndarray, least: np.ndarray, slack: np.ndarray, lapos: np.ndarray,
) -> None:  # fmt: skip
    """Classes ``ks[:n]`` join the active set and their links' lists; their links'
    parts are united, and the parts found again when that changed them (``count[2]``).
    Their service goes beside them (``a_rate`` ...); a class outside the active set has
    rate 0 (it left with 0, or the last fallback's rates were taken back), and the
    filling gives it its rate. The arrays come one by one, read off the tuples once per
    ``toggle``, not per flipped link."""
    for t in range(n):
        k = ks[t]
        i = count[0]
        u, d = up[k], down[k]
        aset[i], a_up[i], a_down[i], a_mult[i] = k, u, d, mult[k]
        a_rate[i], a_served[i], a_least[i], a_slack[i] = 0.0, served[k], least[k], slack[k]
        apos[k] = i
        count[0] = i + 1
        for s in range(2):
            v = u if s == 0 else d
            to, at, o = aend[v], kpos[s, k], lcls[aend[v]]
            lcls[at], lcls[to] = o, k  # k swapped to the end of v's active classes
            lother[at], lother[to] = lother[to], lother[at]
            lmult[at], lmult[to] = lmult[to], mult[k]
            kpos[s, o] = at  # v is an uplink of every class on it, or a downlink
            kpos[s, k] = to
            aend[v] = to + 1
            cnt0[v] += mult[k]
            deg[v] += 1
            dirty[v] = True
        lapos[kpos[0, k]], lapos[kpos[1, k]] = i, i
        ru, rd = find_root(par, u), find_root(par, d)
        if ru != rd:
            par[max(ru, rd)] = min(ru, rd)
            count[2] = 1
        elif l_part[u] < 0 or l_part[d] < 0:
            count[2] = 1


@kernel
def _leave_all(
    ks: np.ndarray, n: int, up: np.ndarray, down: np.ndarray, mult: np.ndarray,
    aset: np.ndarray, apos: np.ndarray, a_up: np.ndarray, a_down: np.ndarray,
    a_mult: np.ndarray, count: np.ndarray, rate: np.ndarray, books: np.ndarray,
    aend: np.ndarray, cnt0: np.ndarray, deg: np.ndarray, l_cyc: np.ndarray,
    dirty: np.ndarray, lcls: np.ndarray, lother: np.ndarray, lmult: np.ndarray,
    kpos: np.ndarray, a_rate: np.ndarray, a_served: np.ndarray, a_least: np.ndarray,
    a_slack: np.ndarray, served: np.ndarray, lapos: np.ndarray,
) -> None:  # fmt: skip
    """Classes ``ks[:n]`` leave the active set with rate 0 (their parts are not split),
    their ``served`` taken back from beside them; the last active class takes the place
    of each, with its service and its entries' ``lapos``."""
    for t in range(n):
        k = ks[t]
        i, last = apos[k], count[0] - 1
        j = aset[last]
        served[k] = a_served[i]
        aset[i], a_up[i], a_down[i], a_mult[i] = j, a_up[last], a_down[last], a_mult[last]
        a_rate[i], a_served[i] = a_rate[last], a_served[last]
        a_least[i], a_slack[i] = a_least[last], a_slack[last]
        apos[j] = i
        apos[k] = -1
        count[0] = last
        rate[k] = 0.0
        for s in range(2):
            v = up[k] if s == 0 else down[k]
            to, at = aend[v] - 1, kpos[s, k]
            o = lcls[to]
            lcls[at], lcls[to] = o, k  # k swapped to the end of v's active classes, out
            lother[at], lother[to] = lother[to], lother[at]
            lmult[at], lmult[to] = lmult[to], lmult[at]
            lapos[at] = lapos[to]
            kpos[s, o] = at  # v is an uplink of every class on it, or a downlink
            kpos[s, k] = to
            aend[v] = to
            cnt0[v] -= mult[k]
            deg[v] -= 1
            dirty[v] = True
        if j != k:  # its entries are active: they say where it went
            lapos[kpos[0, j]], lapos[kpos[1, j]] = i, i
        books[0] += 1
        if l_cyc[up[k]]:  # a part in a cycle may split into ones in order
            books[1] += 1


@kernel
def active_remove(c: Classes, net: Net, k: int) -> None:
    net.kbuf[0] = k
    _leave_all(
        net.kbuf, 1, c.up, c.down, c.mult, c.aset, c.apos, c.a_up, c.a_down, c.a_mult,
        c.count, c.rate, net.books, net.aend, net.cnt0, net.deg, net.l_cyc, net.dirty,
        net.lcls, net.lother, net.lmult, net.kpos, c.a_rate, c.a_served, c.a_least, c.a_slack,
        c.served, net.lapos,
    )  # fmt: skip


@kernel
def member_lost(c: Classes, net: Net, k: int, lost: int) -> None:
    """Active class ``k`` lost ``lost`` flows: its part is filled again. One left with
    no flows stays in the active set, taking no capacity, until the next filling
    (``net.gone``, ``drop_gone``)."""
    for s in range(2):
        v = c.up[k] if s == 0 else c.down[k]
        net.dirty[v] = True
        net.cnt0[v] -= lost
        net.lmult[net.kpos[s, k]] -= lost
    c.a_mult[c.apos[k]] = c.mult[k]
    if c.mult[k] == 0:
        net.gone[net.books[2]] = k
        net.books[2] += 1


@kernel
def toggle(c: Classes, net: Net, tol: float) -> None:
    """Open and close links by ``vcap`` and keep the active set in step, a flipped
    link's classes at a time."""
    up, down, apos, mult = c.up, c.down, c.apos, c.mult
    isopen, vcap, vstart, lcls, lother, aend, flips, ks = (
        net.isopen,
        net.vcap,
        net.vstart,
        net.lcls,
        net.lother,
        net.aend,
        net.work[2],
        net.kbuf,
    )
    a_rate, a_served, a_least, a_slack = c.a_rate, c.a_served, c.a_least, c.a_slack
    served, least, slack, lapos = c.served, c.least, c.slack, net.lapos
    aset, a_up, a_down, a_mult, count, rate = c.aset, c.a_up, c.a_down, c.a_mult, c.count, c.rate
    part, cnt0, deg, l_part, dirty, lmult = (
        net.part,
        net.cnt0,
        net.deg,
        net.l_part,
        net.dirty,
        net.lmult,
    )
    kpos, books, l_cyc = net.kpos, net.books, net.l_cyc
    nf = 0
    for v in range(len(vcap)):
        o = vcap[v] > tol
        if o != isopen[v]:
            isopen[v] = o
            flips[nf] = v
            nf += 1
    for i in range(nf):
        v, n = flips[i], 0
        if not isopen[v]:  # every active class of it leaves
            for j in range(vstart[v], aend[v]):
                ks[n] = lcls[j]
                n += 1
        else:  # its other classes join where their other link is open too (read
            # beside each entry, ``lother``: most are not, and need not be looked up)
            for j in range(aend[v], vstart[v + 1]):
                if isopen[lother[j]]:
                    k = lcls[j]
                    if mult[k] > 0:
                        ks[n] = k
                        n += 1
        if n == 0:
            continue
        if isopen[v]:
            _join_all(
                ks, n, up, down, mult, aset, apos, a_up, a_down, a_mult, count, part, aend,
                cnt0, deg, l_part, dirty, lcls, lother, lmult, kpos, a_rate, a_served,
                a_least, a_slack, served, least, slack, lapos,
            )  # fmt: skip
        else:
            _leave_all(
                ks, n, up, down, mult, aset, apos, a_up, a_down, a_mult, count, rate, books,
                aend, cnt0, deg, l_cyc, dirty, lcls, lother, lmult, kpos, a_rate, a_served,
                a_least, a_slack, served, lapos,
            )  # fmt: skip


@kernel
def drop_gone(c: Classes, net: Net) -> None:
    """The classes left with no flows leave the active set as a scan of it from the
    front would remove them: by position, each removal moving the last entry into the
    hole, which goes too when it is one of them (every active class with no flows is in
    ``net.gone``). Sorting the list keeps this O(p log p) for p of them."""
    gone, apos, mult, aset = net.gone, c.apos, c.mult, c.aset
    n = net.books[2]
    net.books[2] = 0
    if n == 0:
        return
    todo = gone[:n][np.argsort(apos[gone[:n]])]
    for k in todo:
        i = apos[k]
        if i < 0:  # left already (a closed link, or moved here and dropped below)
            continue
        while i < c.count[0] and mult[aset[i]] == 0:
            active_remove(c, net, aset[i])
