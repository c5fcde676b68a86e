"""Exact progressive filling (numba) over links, the next link to saturate taken from a
heap of saturation levels: the kernel ``fast_fill`` runs over flow classes.

Members each cross two links with some flows, listed on both (each list entry: the
member, its other link, its flows). Every link whose residual falls to ``tol``
saturates and freezes its unfrozen members at the level reached
(``allocator_fill.maxmin``'s rule). A level only rises when a member leaves a link,
so a stale heap entry is pushed back when it surfaces.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grouper.simulator.kernel import kernel

# ``fast_classes.Net``: the arrays ``links_of`` uses (read and written) are cnt, astart,
# acls, aother, amult and work
Workspace = Any


@kernel
def space(w: Workspace) -> tuple:
    """``maxmin``'s own arrays of a ``Net``, as the tuple it takes: (cnt, res, lv,
    heap_k, heap_v, m_used, work, tol)."""
    return (w.cnt, w.res, w.lv, w.heap_k, w.heap_v, w.m_used, w.work, w.tol)


@kernel
def _push(hk: np.ndarray, hv: np.ndarray, n: int, key: float, v: int) -> int:
    i = n  # a hole moves up to where the entry goes
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] <= key:
            break
        hk[i], hv[i] = hk[p], hv[p]
        i = p
    hk[i], hv[i] = key, v
    return n + 1


@kernel
def _pop(hk: np.ndarray, hv: np.ndarray, n: int) -> tuple[float, int, int]:
    key, v = hk[0], hv[0]
    n -= 1
    lk, lx = hk[n], hv[n]  # the last entry, placed where the hole from the top stops
    i = 0
    while True:
        a = 2 * i + 1
        if a >= n:
            break
        if a + 1 < n and hk[a + 1] < hk[a]:
            a += 1
        if hk[a] >= lk:
            break
        hk[i], hv[i] = hk[a], hv[a]
        i = a
    hk[i], hv[i] = lk, lx
    return key, v, n


@kernel
def links_of(
    mu: np.ndarray, md: np.ndarray, mm: np.ndarray, n: int, links: np.ndarray, w: Workspace
) -> None:
    """Unfrozen flows per link and the members of each link (``w.acls`` from
    ``w.astart[v]`` to ``w.work[0][v]``, each entry's other link and flows beside it in
    ``w.aother`` and ``w.amult``), for members ``0..n-1`` whose links are all in
    ``links``: the work is the members' and those links', not every link's."""
    cnt, start, ent, cur, other, flows = w.cnt, w.astart, w.acls, w.work[0], w.aother, w.amult
    for v in links:
        cnt[v] = 0
        cur[v] = 0
    for i in range(n):
        cnt[mu[i]] += mm[i]
        cnt[md[i]] += mm[i]
        cur[mu[i]] += 1
        cur[md[i]] += 1
    off = 0
    for v in links:
        start[v] = off
        off += cur[v]
        cur[v] = start[v]
    for i in range(n):
        for v, o in ((mu[i], md[i]), (md[i], mu[i])):
            ent[cur[v]], other[cur[v]], flows[cur[v]] = i, o, mm[i]
            cur[v] += 1


@kernel
def maxmin(rate: np.ndarray, cap: np.ndarray, links: np.ndarray, lists: tuple, ws: tuple) -> None:
    """Exact progressive filling of the members listed on ``links`` in link capacities
    ``cap`` (``allocator_fill.maxmin``: every link whose residual falls to ``tol``
    saturates and freezes its members at the level reached). ``lists`` = (start, end,
    member, other link, flows): link v's entries are ``start[v]..end[v]-1``, each a
    member, the other link it crosses (in ``links`` too) and its flows. Rates into
    ``rate``; rate x flows per link added to ``m_used`` (the caller zeroes the links
    first); ``cnt`` holds each link's flows (the caller's) and counts down its unfrozen
    ones. ``ws`` is ``space(net)``: (cnt, res, lv, heap_k, heap_v, m_used, work, tol).

    A member is frozen when the first of its two links saturates, and a link's count
    falls to 0 exactly when every member of it with flows is frozen (or it saturated):
    so a saturating link's entry whose other link is at 0 is a member frozen already,
    read off the other link's count (about 2,400 links, in cache) instead of a mark per
    member. A member with no flows (a class whose flows all ended, until it leaves) may
    then keep its last rate: it moves nothing."""
    # a call that passed the whole ``Net`` (dozens of arrays, each reference counted)
    # cost about 0.4 us, as much as the work per link: ``ws`` holds only these
    astart, aend, acls, aother, amult = lists
    cnt, res, lv, hk, hv, used, work, tols = ws
    tol = tols[0]
    batch, aside = work[1], work[2]
    h = 0
    for v in links:
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
        for i in range(nb):  # each link's unfrozen members at ``level``
            b = batch[i]
            ub = used[b]  # kept in a register: a member's other link is never b
            for j in range(astart[b], aend[b]):
                o = aother[j]
                if cnt[o] <= 0:  # its other link is done: it was frozen there
                    continue
                m = amult[j]
                rate[acls[j]] = level
                ub += level * m
                used[o] += level * m
                if lv[o] != level:  # its other link loses it (once per level)
                    res[o] -= (level - lv[o]) * cnt[o]
                    lv[o] = level
                cnt[o] -= m
            used[b] = ub
            cnt[b] = 0
        for i in range(na):
            x = aside[i]
            if cnt[x] > 0:
                h = _push(hk, hv, h, lv[x] + res[x] / cnt[x], x)
