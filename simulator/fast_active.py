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
pieces of a part that can be ordered can be too, so only a leave inside a part that
cannot (``books[1]``) asks for the parts to be found again exactly.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from grouper.simulator.fast_classes import Classes, Net
from grouper.simulator.queue_order import find_root

# These kernels take arrays, not the ``Classes`` and ``Net`` tuples: numba
# reference-counts every array of a tuple passed to a call (about 0.4 us for ``Net``),
# more than the work of a call per class here.


@njit(cache=True)
def _swap(k: int, v: int, to: int, pos: np.ndarray, lcls: np.ndarray, up: np.ndarray,
          kpos_u: np.ndarray, kpos_d: np.ndarray) -> None:  # fmt: skip
    """Class ``k`` swapped with whoever is at ``to`` on link ``v``'s list (``pos``: the
    positions of classes on the lists of their ``v``-side link)."""
    p, o = pos[k], lcls[to]
    lcls[p], lcls[to] = o, k
    if up[o] == v:
        kpos_u[o] = p
    else:
        kpos_d[o] = p
    pos[k] = to


@njit(cache=True)
def _join(
    k: int, up: np.ndarray, down: np.ndarray, mult: np.ndarray, aset: np.ndarray,
    apos: np.ndarray, a_up: np.ndarray, a_down: np.ndarray, a_mult: np.ndarray,
    count: np.ndarray, dirty: np.ndarray, deg: np.ndarray, par: np.ndarray,
    l_part: np.ndarray, lcls: np.ndarray, aend: np.ndarray, kpos_u: np.ndarray,
    kpos_d: np.ndarray, cnt0: np.ndarray,
) -> None:  # fmt: skip
    """Class ``k`` joins the active set and its links' lists; its links' parts are
    united (the parts are found again when that changed them)."""
    n = count[0]
    u, d = up[k], down[k]
    aset[n], a_up[n], a_down[n], a_mult[n] = k, u, d, mult[k]
    apos[k] = n
    count[0] = n + 1
    dirty[u] = dirty[d] = True
    _swap(k, u, aend[u], kpos_u, lcls, up, kpos_u, kpos_d)
    aend[u] += 1
    _swap(k, d, aend[d], kpos_d, lcls, up, kpos_u, kpos_d)
    aend[d] += 1
    cnt0[u] += mult[k]
    cnt0[d] += mult[k]
    deg[u] += 1
    deg[d] += 1
    ru, rd = find_root(par, u), find_root(par, d)
    if ru != rd:
        par[max(ru, rd)] = min(ru, rd)
        count[2] = 1
    elif l_part[u] < 0 or l_part[d] < 0:
        count[2] = 1


@njit(cache=True)
def _leave(
    k: int, up: np.ndarray, down: np.ndarray, mult: np.ndarray, aset: np.ndarray,
    apos: np.ndarray, a_up: np.ndarray, a_down: np.ndarray, a_mult: np.ndarray,
    count: np.ndarray, rate: np.ndarray, dirty: np.ndarray, deg: np.ndarray,
    books: np.ndarray, l_part: np.ndarray, lcls: np.ndarray, aend: np.ndarray,
    kpos_u: np.ndarray, kpos_d: np.ndarray, cnt0: np.ndarray,
) -> None:  # fmt: skip
    """Class ``k`` leaves the active set with rate 0 (its part is not split)."""
    i, n = apos[k], count[0] - 1
    last = aset[n]
    aset[i], a_up[i], a_down[i], a_mult[i] = last, a_up[n], a_down[n], a_mult[n]
    apos[last] = i
    apos[k] = -1
    count[0] = n
    rate[k] = 0.0
    u, d = up[k], down[k]
    aend[u] -= 1
    _swap(k, u, aend[u], kpos_u, lcls, up, kpos_u, kpos_d)
    aend[d] -= 1
    _swap(k, d, aend[d], kpos_d, lcls, up, kpos_u, kpos_d)
    cnt0[u] -= mult[k]
    cnt0[d] -= mult[k]
    dirty[u] = dirty[d] = True
    deg[u] -= 1
    deg[d] -= 1
    books[0] += 1
    if l_part[u] >= books[4]:  # a part that cannot be ordered may split into ones that can
        books[1] += 1


@njit(cache=True)
def active_remove(c: Classes, net: Net, k: int) -> None:
    _leave(
        k, c.up, c.down, c.mult, c.aset, c.apos, c.a_up, c.a_down, c.a_mult, c.count,
        c.rate, net.dirty, net.deg, net.books, net.l_part,
        net.lcls, net.aend, net.kpos_u, net.kpos_d, net.cnt0,
    )  # fmt: skip


@njit(cache=True)
def member_lost(c: Classes, net: Net, k: int, lost: int) -> None:
    """Active class ``k`` lost ``lost`` flows: its part is filled again. One left with
    no flows stays in the active set, taking no capacity, until the next filling
    (``net.gone``, ``drop_gone``)."""
    net.dirty[c.up[k]] = net.dirty[c.down[k]] = True
    c.a_mult[c.apos[k]] = c.mult[k]
    net.cnt0[c.up[k]] -= lost
    net.cnt0[c.down[k]] -= lost
    if c.mult[k] == 0:
        net.gone[net.books[2]] = k
        net.books[2] += 1


@njit(cache=True)
def toggle(c: Classes, net: Net, tol: float) -> None:
    """Open and close links by ``vcap`` and keep the active set in step."""
    up, down, aset, apos, count, mult, rate = c.up, c.down, c.aset, c.apos, c.count, c.mult, c.rate
    a_up, a_down, a_mult = c.a_up, c.a_down, c.a_mult
    isopen, vcap, dirty, deg = net.isopen, net.vcap, net.dirty, net.deg
    par, books, l_part = net.part, net.books, net.l_part
    vstart, vcls, flips = net.vstart, net.vcls, net.work[2]
    lcls, aend, kpos_u, kpos_d, cnt0 = net.lcls, net.aend, net.kpos_u, net.kpos_d, net.cnt0
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
                        k, up, down, mult, aset, apos, a_up, a_down, a_mult, count, rate,
                        dirty, deg, books, l_part, lcls, aend, kpos_u, kpos_d, cnt0,
                    )  # fmt: skip
            elif apos[k] < 0 and mult[k] > 0 and isopen[up[k]] and isopen[down[k]]:
                _join(
                    k, up, down, mult, aset, apos, a_up, a_down, a_mult, count, dirty, deg,
                    par, l_part, lcls, aend, kpos_u, kpos_d, cnt0,
                )  # fmt: skip


@njit(cache=True)
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
