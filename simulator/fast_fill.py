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
* The filling takes the next link to saturate from a heap of saturation levels; a
  level only rises when a class leaves a link, so a stale entry is pushed back when it
  surfaces. A round costs the active classes and the links, not every class.

The levels are the allocator's (the same arithmetic up to rounding, within the
``tol`` it uses); classes left out get 0 where the allocator gives them the tiny level
at which a closed link saturates (at most ``tol`` per flow).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from grouper.simulator.allocator import MAX_ROUNDS


class Classes(NamedTuple):
    """The classes of the flows still moving (rebuilt per plan, ``fast_state``)."""

    up: np.ndarray  # (C,) uplink virtual link
    down: np.ndarray  # (C,) downlink virtual link
    mult: np.ndarray  # (C,) flows still moving
    start: np.ndarray  # (C,) first of the class's flows in ``flow``
    flow: np.ndarray  # flows, class by class, those still moving first
    served: np.ndarray  # (C,) bytes every flow of the class was served since the plan
    rate: np.ndarray  # (C,) rate of each of its flows
    least: np.ndarray  # (C,) least ``key`` (bytes left + served) of its flows
    slack: np.ndarray  # (C,) largest "done" threshold (EPS x size) of its flows
    apos: np.ndarray  # (C,) position in ``aset`` or -1
    aset: np.ndarray  # the active set (both links open)
    pos: np.ndarray  # classes with a rate after the last allocation
    count: np.ndarray  # [active classes, classes in pos, active set changed since filled]


class Net(NamedTuple):
    """Per virtual link: capacities, class lists and the filling's workspace."""

    cap: np.ndarray  # (V,) the port's capacity
    vstart: np.ndarray  # (V+1,) CSR of every class per link
    vcls: np.ndarray
    vnum: np.ndarray  # (V,) classes with flows
    used: np.ndarray  # (V,) rate x flows of its classes (the next allocation's start)
    vcap: np.ndarray  # (V,) what the queues above leave
    again: np.ndarray
    isopen: np.ndarray  # (V,) bool: vcap > tol
    cnt: np.ndarray  # (V,) int64 workspace (unfrozen flows)
    res: np.ndarray  # (V,) residual at level ``lv``
    lv: np.ndarray
    astart: np.ndarray  # (V+1,) CSR of the active classes per link
    acls: np.ndarray
    heap_k: np.ndarray
    heap_v: np.ndarray
    work: np.ndarray  # (3, V) int64: cursor, batch, aside / flips
    m_up: np.ndarray  # (C,) the filling's members: links, flows, class
    m_down: np.ndarray
    m_mult: np.ndarray
    m_cls: np.ndarray
    m_rate: np.ndarray  # (C,) their rates
    m_used: np.ndarray  # (V,) rate x flows per link
    cnt0: np.ndarray  # (V,) flows per link of the gathered members
    filled: np.ndarray  # (V,) the capacities of the last filling
    tol: np.ndarray  # [tol]


@njit(cache=True)
def _push(hk: np.ndarray, hv: np.ndarray, n: int, key: float, v: int) -> int:
    i = n
    hk[i], hv[i] = key, v
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] <= hk[i]:
            break
        hk[p], hk[i] = hk[i], hk[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return n + 1


@njit(cache=True)
def _pop(hk: np.ndarray, hv: np.ndarray, n: int) -> tuple[float, int, int]:
    key, v = hk[0], hv[0]
    n -= 1
    hk[0], hv[0] = hk[n], hv[n]
    i = 0
    while True:
        a, b, m = 2 * i + 1, 2 * i + 2, i
        if a < n and hk[a] < hk[m]:
            m = a
        if b < n and hk[b] < hk[m]:
            m = b
        if m == i:
            break
        hk[m], hk[i] = hk[i], hk[m]
        hv[m], hv[i] = hv[i], hv[m]
        i = m
    return key, v, n


@njit(cache=True)
def active_add(c: Classes, k: int) -> None:
    n = c.count[0]
    c.aset[n] = k
    c.apos[k] = n
    c.count[0] = n + 1
    c.count[2] = 1


@njit(cache=True)
def active_remove(c: Classes, k: int) -> None:
    i, n = c.apos[k], c.count[0] - 1
    last = c.aset[n]
    c.aset[i] = last
    c.apos[last] = i
    c.apos[k] = -1
    c.count[0] = n
    c.count[2] = 1
    c.rate[k] = 0.0


@njit(cache=True)
def member_lost(c: Classes, net: Net, k: int, lost: int) -> None:
    """Active class ``k`` lost ``lost`` flows. While the filling's members are current
    (``apos`` is the member's index) it only counts them out: a class left with none
    stays a member with no flows (it takes no capacity) until the next gathering,
    which drops it from the active set."""
    if c.count[2]:
        if c.mult[k] == 0:
            active_remove(c, k)
        return
    net.m_mult[c.apos[k]] -= lost
    net.cnt0[c.up[k]] -= lost
    net.cnt0[c.down[k]] -= lost


@njit(cache=True)
def _toggle(c: Classes, net: Net, tol: float) -> None:
    """Open and close links by ``vcap`` and keep the active set in step."""
    flips = net.work[2]
    nf = 0
    for v in range(len(net.vcap)):
        o = net.vcap[v] > tol
        if o != net.isopen[v]:
            net.isopen[v] = o
            flips[nf] = v
            nf += 1
    for i in range(nf):
        v = flips[i]
        for j in range(net.vstart[v], net.vstart[v + 1]):
            k = net.vcls[j]
            if not net.isopen[v]:
                if c.apos[k] >= 0:
                    active_remove(c, k)
            elif c.apos[k] < 0 and c.mult[k] > 0 and net.isopen[c.up[k]] and net.isopen[c.down[k]]:
                active_add(c, k)


@njit(cache=True)
def _links_of(mu: np.ndarray, md: np.ndarray, mm: np.ndarray, n: int, nl: int, w: Net) -> None:
    """Unfrozen flows per link and the CSR of the members per link."""
    cnt, start, ent, cur = w.cnt, w.astart, w.acls, w.work[0]
    cnt[:nl] = 0
    start[: nl + 1] = 0
    for i in range(n):
        cnt[mu[i]] += mm[i]
        cnt[md[i]] += mm[i]
        start[mu[i] + 1] += 1
        start[md[i] + 1] += 1
    for v in range(nl):
        start[v + 1] += start[v]
        cur[v] = start[v]
    for i in range(n):
        ent[cur[mu[i]]] = i
        cur[mu[i]] += 1
        ent[cur[md[i]]] = i
        cur[md[i]] += 1


@njit(cache=True)
def _freeze(mu: np.ndarray, md: np.ndarray, mm: np.ndarray, w: Net, b: int, level: float) -> None:
    """Every unfrozen member of link ``b`` at ``level``; their other links lose them."""
    cnt, res, lv, rate, used = w.cnt, w.res, w.lv, w.m_rate, w.m_used
    for j in range(w.astart[b], w.astart[b + 1]):
        i = w.acls[j]
        if rate[i] >= 0.0:
            continue
        rate[i] = level
        m = mm[i]
        used[mu[i]] += level * m
        used[md[i]] += level * m
        for o in (mu[i], md[i]):
            if cnt[o] > 0:
                res[o] -= (level - lv[o]) * cnt[o]
                lv[o] = level
                cnt[o] -= m
    cnt[b] = 0


@njit(cache=True)
def _maxmin(
    mu: np.ndarray, md: np.ndarray, mm: np.ndarray, n: int, cap: np.ndarray, w: Net
) -> None:
    """Exact progressive filling of members ``0..n-1`` (links ``mu``, ``md``, ``mm``
    flows each) in link capacities ``cap`` (``allocator_kernel._maxmin``: every link
    whose residual falls to ``tol`` saturates and freezes its members at the level
    reached): rates into ``w.m_rate``, rate x flows per link into ``w.m_used``."""
    nl, tol = len(cap), w.tol[0]
    cnt, res, lv, hk, hv = w.cnt, w.res, w.lv, w.heap_k, w.heap_v
    batch, aside = w.work[1], w.work[2]
    w.m_rate[:n] = -1.0
    w.m_used[:nl] = 0.0
    h = 0
    for v in range(nl):
        if cnt[v] > 0:
            res[v], lv[v] = cap[v], 0.0
            h = _push(hk, hv, h, res[v] / cnt[v], v)
    level = 0.0
    while h > 0:
        s, v, h = _pop(hk, hv, h)
        if cnt[v] <= 0:
            continue
        sat = lv[v] + res[v] / cnt[v]
        if sat > s:  # members left it since it was pushed: its level rose
            h = _push(hk, hv, h, sat, v)
            continue
        level = max(level, sat)
        nb, na = 1, 0
        batch[0] = v
        while h > 0 and hk[0] <= level + tol:
            _, x, h = _pop(hk, hv, h)
            if cnt[x] <= 0:
                continue
            if res[x] - (level - lv[x]) * cnt[x] <= tol:
                batch[nb] = x
                nb += 1
            else:
                aside[na] = x
                na += 1
        for i in range(nb):
            _freeze(mu, md, mm, w, batch[i], level)
        for i in range(na):
            x = aside[i]
            if cnt[x] > 0:
                h = _push(hk, hv, h, lv[x] + res[x] / cnt[x], x)


@njit(cache=True)
def _fill(c: Classes, net: Net) -> None:
    """The active classes' rates in ``net.vcap`` (into ``net.m_rate``, in ``aset``
    order) and their use per link (``net.used``). The members are gathered so that the
    filling reads them in order, again only when the active set changed (a member
    that lost flows is counted out in place: ``member_lost``)."""
    mu, md, mm = net.m_up, net.m_down, net.m_mult
    net.filled[:] = net.vcap
    if c.count[2]:
        i = 0
        while i < c.count[0]:  # classes that lost every flow leave the active set
            if c.mult[c.aset[i]] == 0:
                active_remove(c, c.aset[i])
            else:
                i += 1
        n = c.count[0]
        for i in range(n):
            k = c.aset[i]
            mu[i], md[i], mm[i] = c.up[k], c.down[k], c.mult[k]
        _links_of(mu, md, mm, n, len(net.vcap), net)
        net.cnt0[:] = net.cnt
        c.count[2] = 0
    else:
        net.cnt[:] = net.cnt0
    n = c.count[0]
    _maxmin(mu, md, mm, n, net.vcap, net)
    net.used[:] = net.m_used[: len(net.used)]


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
def _moved(net: Net) -> bool:
    """Whether a link with members got another capacity than the last filling's."""
    for v in range(len(net.vcap)):
        if net.cnt0[v] > 0 and net.vcap[v] != net.filled[v]:
            return True
    return False


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
    for r in range(MAX_ROUNDS):
        _toggle(c, net, tol)
        if r == 0 or c.count[2] or _moved(net):
            _fill(c, net)  # else the same members in the same capacities: the same rates
        _virtual_capacity(net.used, net.cap, q, net.again)
        if _settled(net, tol):
            n = c.count[0]
            for i in range(n):
                c.rate[c.aset[i]] = net.m_rate[i]
            c.pos[:n] = c.aset[:n]
            c.count[1] = n
            return True
        net.vcap[:] = net.again
    _fallback(c, net, q)
    return False


@njit(cache=True)
def _fallback(c: Classes, net: Net, q: int) -> None:
    """A priority cycle: every class at its worst queue (``allocate``'s fallback):
    level by level, max-min over ports in what the levels above left."""
    residual = net.cap[::q].copy()
    mu, md, mm, members = net.m_up, net.m_down, net.m_mult, net.m_cls
    start = np.zeros(q + 1, np.int64)  # the classes with flows, by worst queue
    for k in range(len(c.mult)):
        if c.mult[k] > 0:
            start[max(c.up[k] % q, c.down[k] % q) + 1] += 1
    start = np.cumsum(start)
    cur = start[:-1].copy()
    for k in range(len(c.mult)):
        if c.mult[k] > 0:
            b = max(c.up[k] % q, c.down[k] % q)
            members[cur[b]] = k
            cur[b] += 1
    n_pos = 0
    for b in range(q):
        lo, n = start[b], start[b + 1] - start[b]
        if n == 0:
            continue
        for i in range(n):
            k = members[lo + i]
            mu[i], md[i], mm[i] = c.up[k] // q, c.down[k] // q, c.mult[k]
        _links_of(mu, md, mm, n, len(residual), net)
        _maxmin(mu, md, mm, n, residual, net)
        for p in range(len(residual)):
            residual[p] = max(residual[p] - net.m_used[p], 0.0)
        for i in range(n):
            k = members[lo + i]
            c.rate[k] = net.m_rate[i]
            if c.rate[k] > 0.0:
                c.pos[n_pos] = k
                n_pos += 1
    c.count[1] = n_pos
    c.count[2] = 1  # the members were the fallback's
    _used(c, net, c.pos, n_pos)
