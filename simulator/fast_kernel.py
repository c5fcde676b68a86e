"""Rates per flow class for the fast path (numba): the allocator's semantics, one entry
per class of identical flows.

On a big switch a flow crosses its sender's uplink (queue: its band) and its
receiver's downlink (queue: its receiver band). Flows with the same four numbers are
frozen at the same level by progressive filling, so they get the same rate: the
classes are filled once each, with their multiplicity in every count. The arithmetic
is :mod:`simulator.allocator_kernel`'s (virtual links per (link, queue), exact
progressive filling, the fixed point over the queues' leftovers, ``MAX_ROUNDS``), so
the rates are the same; with the contention penalty on, or where the fixed point does
not settle (the worst-queue fallback), the flows go to ``allocate`` one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from grouper.simulator.allocator import EPS, MAX_ROUNDS, allocate
from grouper.simulator.allocator_kernel import _csr, _group, _virtual_capacity


@dataclass
class Classes:
    """The classes of the active flows and their virtual links (built per plan)."""

    of_flow: np.ndarray  # class of every active flow
    pl: np.ndarray  # per crossing (two per class: uplink, downlink): link
    pq: np.ndarray  # queue
    pf: np.ndarray  # class
    vidx: np.ndarray  # virtual link of every crossing
    by_v: np.ndarray
    v_start: np.ndarray
    vlink: np.ndarray
    by_flow: np.ndarray
    flow_start: np.ndarray


def build_classes(up: np.ndarray, down: np.ndarray, band: np.ndarray, rband: np.ndarray) -> Classes:
    """Classes of flows by (uplink, band, downlink, receiver band)."""
    q = int(max(band.max(initial=0), rband.max(initial=0))) + 1
    links = int(max(up.max(initial=0), down.max(initial=0))) + 1
    key = ((up * q + band) * links + down) * q + rband
    uniq_key, of_flow = np.unique(key, return_inverse=True)
    of_flow = of_flow.reshape(-1).astype(np.int64)
    rest, rb = np.divmod(uniq_key, q)
    rest, dn = np.divmod(rest, links)
    upl, bd = np.divmod(rest, q)
    uniq = (upl, bd, dn, rb)
    nc = len(uniq_key)
    pf = np.repeat(np.arange(nc, dtype=np.int64), 2)
    pl = np.empty(2 * nc, np.int64)
    pq = np.empty(2 * nc, np.int64)
    pl[0::2], pl[1::2] = uniq[0], uniq[2]
    pq[0::2], pq[1::2] = uniq[1], uniq[3]
    vidx, by_v, v_start, vlink, by_flow, flow_start = _structure(pf, pl, pq, nc)
    return Classes(of_flow, pl, pq, pf, vidx, by_v, v_start, vlink, by_flow, flow_start)


@njit(cache=True)
def _structure(pf: np.ndarray, pl: np.ndarray, pq: np.ndarray, n: int) -> tuple:
    span = pq.max() + 1
    vidx, by_v, v_start = _group(pl * span + pq)
    nv = len(v_start) - 1
    vlink = np.empty(nv, dtype=np.int64)
    for v in range(nv):
        vlink[v] = pl[by_v[v_start[v]]]
    by_flow, flow_start = _csr(pf, n)
    return vidx, by_v, v_start, vlink, by_flow, flow_start


@njit(cache=True)
def _maxmin_w(
    pf: np.ndarray, pv: np.ndarray, mult: np.ndarray, vcap: np.ndarray, n: int, tol: float,
    by_flow: np.ndarray, flow_start: np.ndarray, by_v: np.ndarray, v_start: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """``allocator_kernel._maxmin`` (no contention cost) with ``mult`` flows per class."""
    nv = len(vcap)
    rates = np.zeros(n)
    residual = vcap.copy()
    count = np.zeros(nv)
    for i in range(len(pf)):
        count[pv[i]] += mult[pf[i]]
    frozen = mult == 0.0
    level = 0.0
    # the virtual links still filling (count > 0), in order: an iteration scans them
    # only, not every queue of every link (most saturate at once, at level 0)
    live = np.flatnonzero(count > 0.0)
    while len(live):
        delta = np.inf
        for v in live:
            share = residual[v] / count[v]
            if share < delta:
                delta = share
        delta = max(delta, 0.0)
        level += delta
        hit = False
        for v in live:
            residual[v] -= delta * count[v]
            if residual[v] <= tol:
                residual[v] = 0.0
                hit = True
        if not hit:
            break
        for v in live:
            if count[v] > 0.0 and residual[v] == 0.0:
                for k in range(v_start[v], v_start[v + 1]):
                    f = pf[by_v[k]]
                    if frozen[f]:
                        continue
                    frozen[f] = True
                    rates[f] = level
                    for c in range(flow_start[f], flow_start[f + 1]):
                        count[pv[by_flow[c]]] -= mult[f]
        keep = 0
        for v in live:
            if count[v] > 0.0:
                live[keep] = v
                keep += 1
        live = live[:keep]
    for i in range(len(pf)):
        f = pf[i]
        if not frozen[f]:
            rates[f] = level
    return rates


@njit(cache=True)
def _fixed_point(
    pf: np.ndarray, vidx: np.ndarray, mult: np.ndarray, start_used: np.ndarray,
    cap_v: np.ndarray, vlink: np.ndarray, by_flow: np.ndarray, flow_start: np.ndarray,
    by_v: np.ndarray, v_start: np.ndarray, tol: float, max_rounds: int,
) -> tuple[np.ndarray, bool]:  # fmt: skip
    n = len(mult)
    unit = np.ones(len(cap_v))  # a class's use is counted at face value (rate x flows)
    vcap = _virtual_capacity(start_used, pf, vidx, unit, cap_v, vlink)
    rates = np.zeros(n)
    for _ in range(max_rounds):
        rates = _maxmin_w(pf, vidx, mult, vcap, n, tol, by_flow, flow_start, by_v, v_start)
        again = _virtual_capacity(rates * mult, pf, vidx, unit, cap_v, vlink)
        settled = True
        for v in range(len(vcap)):
            if abs(again[v] - vcap[v]) > tol + 1e-9 * abs(vcap[v]):
                settled = False
                break
        if settled:
            return rates, True
        vcap = again
    return rates, False


@njit(cache=True)
def _worst_queue_w(
    pf: np.ndarray, pl: np.ndarray, pq: np.ndarray, mult: np.ndarray, capacity: np.ndarray,
    tol: float,
) -> np.ndarray:  # fmt: skip
    """``allocator_kernel._by_worst_queue`` (no contention cost) per class."""
    n = len(mult)
    level = np.full(n, -1, dtype=np.int64)
    for i in range(len(pf)):
        level[pf[i]] = max(level[pf[i]], pq[i])
    residual = capacity.astype(np.float64).copy()
    nl = len(residual)
    rates = np.zeros(n)
    lv = level[pf]
    for q in np.unique(lv):
        sel = np.flatnonzero(lv == q)
        spf, spl = pf[sel], pl[sel]
        by_flow, flow_start = _csr(spf, n)
        by_l, l_start = _csr(spl, nl)
        got = _maxmin_w(spf, spl, mult, residual, n, tol, by_flow, flow_start, by_l, l_start)
        for k in range(len(spf)):
            residual[spl[k]] -= got[spf[k]] * mult[spf[k]]
        for li in range(nl):
            residual[li] = max(residual[li], 0.0)
        rates += got
    return rates


def class_rates(
    cls: Classes | None,
    flows: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    capacity: np.ndarray,
    penalty: float,
    start: np.ndarray,
) -> np.ndarray:
    """Rates of the active flows (``flows``: uplink, downlink, band, receiver band,
    task of each) warm-started from ``start``, as ``allocate`` gives them."""
    up, down, band, rband, task = flows
    tol = EPS * max(float(capacity.max(initial=0.0)), 1.0)
    if cls is not None and penalty <= 0:
        nc = len(cls.pf) // 2
        mult = np.bincount(cls.of_flow, minlength=nc).astype(float)
        used = np.bincount(cls.of_flow, weights=start, minlength=nc)
        cap_v = np.asarray(capacity, dtype=float)[cls.vlink]
        rates, settled = _fixed_point(
            cls.pf, cls.vidx, mult, used, cap_v, cls.vlink, cls.by_flow, cls.flow_start,
            cls.by_v, cls.v_start, tol, MAX_ROUNDS,
        )  # fmt: skip
        if not settled:  # a priority cycle: every class at its worst queue, as allocate
            rates = _worst_queue_w(cls.pf, cls.pl, cls.pq, mult, capacity, tol)
        return rates[cls.of_flow]
    n = len(up)
    pf = np.repeat(np.arange(n, dtype=np.int64), 2)
    pl = np.empty(2 * n, np.int64)
    pq = np.empty(2 * n, np.int64)
    pl[0::2], pl[1::2] = up, down
    pq[0::2], pq[1::2] = band, rband
    return allocate((pf, pl), capacity, pq, task, penalty, per_crossing=True, start=start)
