"""The fast path's worst-queue fallback (numba): where the allocator's rounds do not
settle (a priority cycle), every class is filled at its worst queue, level by level,
max-min over the ports in what the levels above left (``allocator_kernel._by_worst_queue``).
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.fast_classes import Classes, Net
from grouper.simulator.kernel import kernel
from grouper.simulator.progressive import links_of, maxmin, space


@kernel(inline="always")
def drop_fallback_rates(c: Classes) -> None:
    """After a fallback: its by-class rates (the classes in ``pos``) back to 0, so the
    next start is the rounds' last filling, kept beside the active set (``a_rate``)."""
    rate, pos = c.rate, c.pos
    for i in range(c.count[1]):
        rate[pos[i]] = 0.0


@kernel
def _used(c: Classes, net: Net, classes: np.ndarray, n: int) -> None:
    used, rate, mult, up, down = net.used, c.rate, c.mult, c.up, c.down
    used[:] = 0.0
    for i in range(n):
        k = classes[i]
        x = rate[k] * mult[k]
        used[up[k]] += x
        used[down[k]] += x


@kernel
def by_worst_queue(
    up: np.ndarray, down: np.ndarray, q: int, order: np.ndarray, start: np.ndarray,
    ports: np.ndarray,
) -> None:  # fmt: skip
    """The classes sorted by worst queue (counting sort) into ``order``, where each
    queue's start into ``start``, and the (up, down) ports of each in that order into
    ``ports``: fixed between plans, found at a plan's first fallback (most plans have
    none: sorting at every plan was 0.9% of a run), so the fallback need not sort, and
    reads the ports in order."""
    start[:] = 0
    for k in range(len(up)):
        start[max(up[k] % q, down[k] % q) + 1] += 1
    for b in range(q):
        start[b + 1] += start[b]
    cur = start[:-1].copy()
    for k in range(len(up)):
        b = max(up[k] % q, down[k] % q)
        order[cur[b]] = k
        ports[0, cur[b]], ports[1, cur[b]] = up[k] // q, down[k] // q
        cur[b] += 1


@kernel
def fallback(c: Classes, net: Net, q: int) -> None:
    """A priority cycle: every class at its worst queue (``allocate_settled``'s fallback):
    level by level, max-min over ports in what the levels above left. A class with a
    port left with no capacity (``tol``) gets 0 without taking part, as in the active
    set (the allocator gives it the tiny level at which that port saturates). The
    arrays its loops read are taken off the tuples first (an array read off a tuple
    inside a loop is reference-counted at every pass)."""
    if net.worst_start[0] < 0:  # the plan's first fallback
        by_worst_queue(c.up, c.down, q, net.worst, net.worst_start, net.worst_ports)
    residual = net.cap[::q].copy()
    tol = net.tol[0]
    mu, md, mm, members = net.m_up, net.m_down, net.m_mult, net.m_cls
    worst, ports, mult = net.worst, net.worst_ports, c.mult
    wstart, m_used, m_rate, rate, pos = net.worst_start, net.m_used, net.m_rate, c.rate, c.pos
    n_pos = 0
    # the rounds' last rates stay beside the active set (``a_rate``) and their use in
    # ``net.restart``: the next allocation (or plan) starts from them; the fallback's
    # rates, by class, are what flows are served at
    net.restart[:] = net.used
    every = np.arange(len(residual))
    for b in range(q):
        n = 0
        for j in range(wstart[b], wstart[b + 1]):
            pu, pd = ports[0, j], ports[1, j]
            if residual[pu] > tol and residual[pd] > tol and mult[worst[j]] > 0:
                k = worst[j]
                mu[n], md[n], mm[n], members[n] = pu, pd, mult[k], k
                n += 1
        if n == 0:
            continue
        links_of(mu, md, mm, n, every, net)
        m_used[: len(residual)] = 0.0
        lists = (net.astart, net.work[0], net.acls, net.aother, net.amult)
        maxmin(m_rate, residual, every, lists, space(net))
        for p in range(len(residual)):
            residual[p] = max(residual[p] - m_used[p], 0.0)
        for i in range(n):
            k = members[i]
            rate[k] = m_rate[i]
            if rate[k] > 0.0:
                pos[n_pos] = k
                n_pos += 1
    c.count[1] = n_pos
    net.dirty[:] = True  # every part is filled again
    _used(c, net, pos, n_pos)
