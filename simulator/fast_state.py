"""The fast path's event loop over flow classes (numba).

Flows that share both virtual links (``fast_fill``) share one rate, so a class keeps
one ``served`` counter for all of its flows: a flow's bytes left are its ``key`` less
its class's ``served``, and only the class's least key decides when one of them ends.
An event therefore costs the classes with a rate (the time step, the bytes served), the
classes where a flow ends (a scan of their flows) and the allocation (``fast_fill``),
never every flow still moving. Classes are rebuilt when the plan changes (a coflow
arrives or ends); between plans, runs of events stay inside compiled code.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from grouper.simulator.allocator import MAX_ROUNDS
from grouper.simulator.fast_active import member_lost
from grouper.simulator.fast_classes import Classes, Net
from grouper.simulator.fast_fallback import drop_fallback_rates
from grouper.simulator.fast_fill import allocate_classes
from grouper.simulator.grouping import csr, runs
from grouper.simulator.kernel import kernel
from grouper.simulator.offer_sweep import MAX_CYCLE

EPS = 1e-9  # as the engine's: bytes below it are no bytes


class Flows(NamedTuple):
    """Every flow of the workload, coflow after coflow, and every coflow's count."""

    up: np.ndarray  # uplink port (the sender's host index)
    down: np.ndarray  # downlink port (hosts + the receiver's host index)
    size: np.ndarray
    co: np.ndarray  # coflow
    key: np.ndarray  # bytes left + its class's ``served`` (flows still moving)
    busy: np.ndarray  # per coflow: flows still moving


def empty_classes() -> Classes:
    z, f = np.zeros(0, np.int64), np.zeros(0)
    count = np.array([0, 0, 1, 0], np.int64)
    return Classes(z, z, z, z, z, f, f, f, f, z, z, z, z, z, z, count, f, f, f, f)


@kernel(inline="always")
def _served(k: int, apos: np.ndarray, a_served: np.ndarray, served: np.ndarray) -> float:
    """Class ``k``'s ``served``: beside it in the active set, or by class. It takes
    the arrays, not ``Classes``: a tuple's array read inside a loop is reference-counted
    at every pass."""
    i = apos[k]
    return a_served[i] if i >= 0 else served[k]


@kernel
def _moving(c: Classes, fl: Flows, new: np.ndarray) -> tuple:
    """The flows still moving, class by class, then ``new``: bytes left, last rate.
    The active set's service is written back by class first (these classes are being
    replaced): one pass over the active set, not a lookup per class."""
    served, rate, aset, mult, start, flow = c.served, c.rate, c.aset, c.mult, c.start, c.flow
    a_served, a_rate, key, size = c.a_served, c.a_rate, fl.key, fl.size
    if c.count[3]:  # after a fallback: the rounds' last rates are the start, not its own
        drop_fallback_rates(c)
    for i in range(c.count[0]):
        served[aset[i]] = a_served[i]
        rate[aset[i]] = a_rate[i]
    m = mult.sum() + len(new)
    fs, rem, prev = np.empty(m, np.int64), np.empty(m), np.empty(m)
    i = 0
    for k in range(len(mult)):
        for j in range(start[k], start[k] + mult[k]):
            f = flow[j]
            fs[i], rem[i], prev[i] = f, key[f] - served[k], rate[k]
            i += 1
    for f in new:
        fs[i], rem[i], prev[i] = f, size[f], 0.0
        i += 1
    return fs, rem, prev


@kernel
def _by_links(vu: np.ndarray, vd: np.ndarray, nv: int) -> tuple:
    """``allocator_kernel._group`` of the keys ``vu * nv + vd``: the same ids, order and
    starts (a stable sort by the pair), by two counting sorts over the ``nv`` links
    (downlink, then uplink) instead of a merge sort of the keys: every plan's rebuild
    sorts every flow still moving."""
    by_down, _ = csr(vd, nv)
    by_up, _ = csr(vu[by_down], nv)
    order = by_down[by_up]
    ids, starts = runs(vu * nv + vd, order)
    return ids, order, starts


@kernel
def rebuild(
    c: Classes, fl: Flows, new: np.ndarray, table: np.ndarray, row: np.ndarray, q: int,
    hosts: int, cap: np.ndarray, default: int, tol: float,
) -> tuple[Classes, Net]:  # fmt: skip
    """The classes under a new plan: ``table[row[coflow], port]`` is a coflow's band on
    a port; ``new`` flows join. The next allocation starts from every flow's last rate
    (the engine's warm start)."""
    fs, rem, prev = _moving(c, fl, new)
    m, nv = len(fs), 2 * hosts * q
    vu, vd = np.empty(m, np.int64), np.empty(m, np.int64)
    used = np.zeros(nv)
    fup, fdown, fco, fkey, fsize = fl.up, fl.down, fl.co, fl.key, fl.size
    for i in range(m):
        f = fs[i]
        s, d = fup[f], fdown[f]
        b = rb = default
        if s != d - hosts:  # local flows (they cross ports only with local_on_ports)
            b, rb = table[row[fco[f]], s], table[row[fco[f]], d]
        vu[i], vd[i] = s * q + b, d * q + rb
        used[vu[i]] += prev[i]
        used[vd[i]] += prev[i]
    ids, order, starts = _by_links(vu, vd, nv)
    nc = len(starts) - 1
    up, down = np.empty(nc, np.int64), np.empty(nc, np.int64)
    least, slack = np.full(nc, np.inf), np.zeros(nc)
    for i in range(m):
        k, f = ids[i], fs[i]
        up[k], down[k] = vu[i], vd[i]
        fkey[f] = rem[i]
        least[k] = min(least[k], rem[i])
        slack[k] = max(slack[k], EPS * max(1.0, fsize[f]))
    new_c = Classes(
        up, down, np.diff(starts), starts[:-1].copy(), fs[order], np.zeros(nc), np.zeros(nc),
        least, slack, np.full(nc, -1, np.int64), np.empty(nc, np.int64),
        np.empty(nc, np.int64), np.empty(nc, np.int64), np.empty(nc, np.int64),
        np.empty(nc, np.int64), np.array([0, 0, 1, 0], dtype=np.int64), np.zeros(nc),
        np.zeros(nc), np.zeros(nc), np.zeros(nc),
    )  # fmt: skip
    return new_c, _net(up, down, nv, q, cap, used, tol)


@kernel
def _net(
    up: np.ndarray, down: np.ndarray, nv: int, q: int, cap: np.ndarray, used: np.ndarray,
    tol: float,
) -> Net:  # fmt: skip
    nc = len(up)
    vstart = np.zeros(nv + 1, np.int64)
    for k in range(nc):
        vstart[up[k] + 1] += 1
        vstart[down[k] + 1] += 1
    vnum = vstart[1:].copy()
    vstart = np.cumsum(vstart)
    cur = vstart[:-1].copy()
    lcls = np.empty(2 * nc, np.int64)  # every class per link, in class order at first
    kpos = np.empty((2, nc), np.int64)  # each class's place on its links' lists
    other = np.empty(2 * nc, np.int64)  # and beside it there, its other link
    for k in range(nc):
        for s in range(2):
            v = up[k] if s == 0 else down[k]
            lcls[cur[v]], kpos[s, k] = k, cur[v]
            other[cur[v]] = down[k] if s == 0 else up[k]
            cur[v] += 1
    vcap = np.repeat(cap, q)
    z = np.zeros(nv)
    return Net(
        vcap, vstart, vnum, used, z.copy(), z.copy(), np.zeros(nv, np.bool_),
        np.zeros(nv, np.int64), z.copy(), z.copy(), np.zeros(nv + 1, np.int64),
        np.empty(2 * nc, np.int64), np.empty(2 * nc, np.int64), np.empty(2 * nc, np.int64),
        z.copy(), np.zeros(nv, np.int64), np.zeros((3, nv), np.int64),
        np.empty(nc, np.int64), np.empty(nc, np.int64), np.empty(nc, np.int64),
        np.empty(nc, np.int64), np.empty(nc), z.copy(),
        np.ones(nv, np.bool_), np.arange(nv), np.zeros(nv, np.int64),
        np.zeros(6, np.int64), np.empty(nc, np.int64), z.copy(),
        np.full(1, tol), np.empty(nc, np.int64), np.full(q + 1, -1, np.int64),
        np.empty((2, nc), np.int64), np.arange(nv) // q,
        np.zeros(nv + 2, np.int64), np.zeros(nv, np.int64),
        np.zeros(nv, np.int64), np.full(nv, -1, np.int64), lcls, other,
        np.zeros(2 * nc, np.int64), vstart[:-1].copy(), kpos,
        np.empty(nc, np.int64), np.zeros(nv, np.bool_), np.empty(2 * nc, np.int64),
        z.copy(), np.full(nv + 1, -1, np.int64), np.full(1, MAX_CYCLE, np.int64),
        np.full(1, MAX_ROUNDS, np.int64),
    )  # fmt: skip


@kernel
def _step_length(c: Classes, t: float, nxt: float) -> float:
    """Time to the next arrival or the next flow to end (the engine's ``dt``): read in
    order beside the active set when the allocation settled, class by class after a
    fallback."""
    best = np.inf
    if c.count[3]:
        pos, rate, least, apos, a_served, served = (
            c.pos,
            c.rate,
            c.least,
            c.apos,
            c.a_served,
            c.served,
        )
        for i in range(c.count[1]):
            k = pos[i]
            if rate[k] > 0.0:
                best = min(best, (least[k] - _served(k, apos, a_served, served)) / rate[k])
    else:
        rate, served, least = c.a_rate, c.a_served, c.a_least
        below = np.inf  # best x (1 + 1e-12): a multiplication rules most classes out
        for i in range(c.count[1]):
            r = rate[i]
            if r > 0.0 and least[i] - served[i] < below * r:
                best = min(best, (least[i] - served[i]) / r)
                below = best * (1.0 + 1e-12)
    dt = nxt - t if nxt - t > 0.0 else np.inf
    if best > 0.0:
        dt = min(dt, best)
    return dt


@kernel
def _rescan(c: Classes, fl: Flows, net: Net, k: int) -> tuple[float, bool]:
    """Class ``k``'s flows that ended (bytes left within EPS of their size, as the
    engine) leave it; returns the bytes they were served past their end (<= 0) and
    whether a coflow ended."""
    served = _served(k, c.apos, c.a_served, c.served)
    flow, key, size, busy, co = c.flow, fl.key, fl.size, fl.busy, fl.co
    s, e = c.start[k], c.start[k] + c.mult[k]
    j, least, slack, extra, ended = s, np.inf, 0.0, 0.0, False
    while j < e:
        f = flow[j]
        left, thr = key[f] - served, EPS * max(1.0, size[f])
        if left <= thr:
            extra += min(left, 0.0)
            busy[co[f]] -= 1
            ended |= busy[co[f]] == 0
            e -= 1  # its rate stays in ``net.used`` until the next filling (``allocate_settled``)
            flow[j], flow[e] = flow[e], f
            continue
        least, slack = min(least, key[f]), max(slack, thr)
        j += 1
    lost = c.mult[k] - (e - s)
    c.mult[k] = e - s
    c.least[k], c.slack[k] = least, slack
    if c.apos[k] >= 0:
        c.a_least[c.apos[k]], c.a_slack[c.apos[k]] = least, slack
    if lost and c.apos[k] >= 0:
        member_lost(c, net, k, lost)
    if e == s:
        net.vnum[c.up[k]] -= 1
        net.vnum[c.down[k]] -= 1
    return extra, ended


@kernel
def _serve(c: Classes, fl: Flows, net: Net, dt: float) -> tuple[float, bool]:
    """Move every class with a rate ``dt`` on; flows that end leave. After a settled
    allocation the active set's rates and service lie beside it, so this reads four
    arrays in order (class by class it was about 10% of sptf's run on FB2010). The
    bytes moved are ``dt`` times the uplinks' use (every moving flow crosses one uplink;
    the allocation left each link's rate x flows in ``net.used``), not a sum over the
    classes."""
    moved, ended, use = 0.0, False, net.used
    for v in range(len(use) // 2):  # uplinks are the first half of the links
        moved += use[v] * dt
    if c.count[3]:  # after a fallback: by class
        pos, rate, apos, a_served, served = c.pos, c.rate, c.apos, c.a_served, c.served
        least, slack = c.least, c.slack
        for i in range(c.count[1]):
            k = pos[i]
            r = rate[k]
            if r <= 0.0:
                continue
            at = apos[k]
            if at >= 0:
                a_served[at] += r * dt
                now = a_served[at]
            else:
                served[k] += r * dt
                now = served[k]
            if least[k] - now <= slack[k]:
                extra, done = _rescan(c, fl, net, k)
                moved += extra
                ended |= done
        return moved, ended
    rate, served, least, slack = c.a_rate, c.a_served, c.a_least, c.a_slack
    for i in range(c.count[1]):
        r = rate[i]
        if r <= 0.0:
            continue
        served[i] += r * dt
        if least[i] - served[i] <= slack[i]:
            extra, done = _rescan(c, fl, net, c.aset[i])
            moved += extra
            ended |= done
    return moved, ended


@kernel
def advance(
    c: Classes, fl: Flows, net: Net, q: int, tol: float, t: float, nxt: float,
    budget: int, max_time: float, out: np.ndarray,
) -> float:  # fmt: skip
    """Events from ``t`` on until a coflow ends, the next arrival (``nxt``) is due,
    ``budget`` more events have run or ``max_time`` is passed; returns the new time.
    ``out``: [events after the first, bytes moved, a coflow ended, stalled, allocations,
    allocations whose rounds did not settle (the worst-queue fallback)]."""
    out[:] = 0.0
    while True:
        out[4] += 1.0
        if not allocate_classes(c, net, q, tol):
            out[5] += 1.0
        dt = _step_length(c, t, nxt)
        if not np.isfinite(dt):
            out[3] = 1.0
            return t
        moved, ended = _serve(c, fl, net, dt)
        out[1] += moved
        t += dt
        if ended or nxt <= t + EPS or out[0] >= budget or t > max_time:
            out[2] = 1.0 if ended else 0.0
            return t
        out[0] += 1.0
