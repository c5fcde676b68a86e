"""The rule's fixed point (``simulator.fabric_rule``) by progressive filling, in one pass.

Every flow starts at 0 and the rates move along straight pieces until none can move.
Capacities are the rule's perturbed ones, ``c x (1 + DELTA x depth)``, so that where a
link and a link downstream of it would fill together the upstream one fills first. On
every piece each flow has a slope:

* a link is *full* when its flows use its capacity; its *binding queue* is its lowest
  queue with a flow moving data, its *candidates* the flows of that queue with the
  largest rate and the flows of the queues below it, all at rate 0 (*held*);
* each candidate has a bottleneck: a full link where the slopes of its queue and the
  queues above add up to 0 (that prefix stays full: the flows above take what they need
  first) and no candidate of its queue rises faster, or none (it rises at 1), the
  upstream link first where several would do (``simulator.fabric_slopes``); a held
  flow's slope is at least 0;
* every other flow rises at slope 1.

A piece ends when a link fills, a rate falls to 0, or a flow catches up with the
candidates of its queue. The end is a fixed point of the perturbed model; the bottleneck
each flow ended at then gives the exact rates (``fabric_rule``'s linear system,
``eps -> 0``), checked to be the rule's fixed point. Where the rule's fixed point is
unique, a path that ends at a fixed point ends at it, so the choices made on the way do
not change the answer.
"""

from __future__ import annotations

from itertools import islice, product

import numpy as np
from numpy.typing import ArrayLike

from grouper.simulator.fabric_rule import NotUnique, System
from grouper.simulator.fabric_slopes import FREE, Piece, slopes

DELTA = 1e-7  # the capacities' perturbation per hop of depth
MAX_PIECES = 10_000
MAX_SEARCH = 4_096  # bottleneck choices tried at most at the end


class _Instance:
    """The crossings of one instance, grouped per link."""

    def __init__(
        self, pf: ArrayLike, pl: ArrayLike, pq: ArrayLike, capacity: ArrayLike, depth: ArrayLike
    ) -> None:
        self.pf, self.pl, self.pq = (np.asarray(a, dtype=np.int64) for a in (pf, pl, pq))
        self.cap0 = np.asarray(capacity, dtype=float)
        self.depth = np.asarray(depth, dtype=float)
        self.n = int(self.pf.max(initial=-1)) + 1
        self.nl = len(self.cap0)
        self.cap = self.cap0 * (1.0 + DELTA * self.depth)
        self.tol = 1e-6 * DELTA * max(float(self.cap0.max(initial=1.0)), 1.0)
        self.on = [np.flatnonzero(self.pl == lk) for lk in range(self.nl)]  # crossings per link


def _roles(
    x: _Instance, r: np.ndarray, full: np.ndarray
) -> tuple[list[list[int]], np.ndarray, dict[int, tuple[int, float]]]:
    """Each flow's full links where it is a candidate, the largest rate of the binding
    queue or in a queue below it at 0 (upstream first); which flows are held at 0 below
    a full link's binding queue; each full link's binding queue and the largest rate in
    it."""
    cands: list[list[int]] = [[] for _ in range(x.n)]
    held = np.zeros(x.n, dtype=bool)
    binding: dict[int, tuple[int, float]] = {}
    for lk in np.flatnonzero(full):
        cs = x.on[lk]
        flows, queues = x.pf[cs], x.pq[cs]
        moving = r[flows] > x.tol
        if not moving.any():
            continue
        b = queues[moving].max()
        held[flows[queues > b]] = True
        for f in flows[queues > b]:  # at 0, a candidate of its queue there
            cands[f].append(int(lk))
        inq = flows[queues == b]
        top = r[inq].max()
        binding[int(lk)] = (int(b), float(top))
        for f in inq[r[inq] >= top - x.tol]:
            cands[f].append(int(lk))
    for f in range(x.n):
        cands[f].sort(key=lambda lk: x.depth[lk])
    return cands, held, binding


def _step(x: _Instance, r: np.ndarray, s: np.ndarray, load: np.ndarray, full: np.ndarray,
          binding: dict[int, tuple[int, float]]) -> float:  # fmt: skip
    """How far the rates move along ``s`` before the next event: a link fills, a rate
    falls to 0, or a flow of a binding queue catches up with its candidates."""
    dt = np.inf
    for lk in range(x.nl):
        rise = s[x.pf[x.on[lk]]].sum()
        if not full[lk] and rise > 1e-12:
            dt = min(dt, max(x.cap[lk] - load[lk], 0.0) / rise)
    down = s < -1e-12
    if down.any():
        dt = min(dt, float((r[down] / -s[down]).min()))
    for lk, (queue, top) in binding.items():
        cs = x.on[lk]
        inq = x.pf[cs[x.pq[cs] == queue]]
        slope = s[inq[r[inq] >= top - x.tol]].max()
        for f in inq[(r[inq] < top - x.tol) & (s[inq] > slope + 1e-12)]:
            dt = min(dt, (top - r[f]) / (s[f] - slope))
    return dt


def fill_rates(
    pf: ArrayLike, pl: ArrayLike, pq: ArrayLike, capacity: ArrayLike, depth: ArrayLike
) -> np.ndarray:
    """The rule's rates (``fabric_rule.fabric_rates``'s arguments and answer)."""
    x = _Instance(pf, pl, pq, capacity, depth)
    r = np.zeros(x.n)
    owner = np.full(x.n, FREE, dtype=np.int64)
    for _ in range(MAX_PIECES):
        load = np.bincount(x.pl, weights=r[x.pf], minlength=x.nl)
        full = load >= x.cap - x.tol
        cands, held, binding = _roles(x, r, full)
        piece = Piece(x.pf, x.pq, x.on, x.depth, binding, cands, held)
        s, owner = slopes(piece)
        if np.abs(s).max(initial=0.0) <= 1e-12:
            break
        dt = _step(x, r, s, load, full, binding)
        if not np.isfinite(dt):
            raise NotUnique("a flow crosses no link that can fill")
        r = np.maximum(r + dt * s, 0.0)
        r[np.abs(r) <= x.tol] = 0.0
    else:
        raise NotUnique(f"no fixed point within {MAX_PIECES} pieces")
    return _exact(x, r, owner)


def _exact(x: _Instance, r: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The rates with ``eps -> 0``: each flow's bottleneck where the filling ended in
    ``fabric_rule``'s linear system. A flow may end tight at several links (its prefix
    full, its rate the largest of its queue): its owner on the last piece is tried
    first, the others where that system is singular."""
    system = System.of(x.pf, x.pl, x.pq, x.cap0, x.depth, x.n)
    used = system.prefix @ r
    slack = 1e-3 * DELTA * max(float(x.cap0.max(initial=1.0)), 1.0)
    options = []
    for f in range(x.n):
        first = int(owner[f])
        tight = [
            int(c)
            for c in np.flatnonzero(x.pf == f)
            if used[c] >= x.cap[x.pl[c]] - slack and r[f] >= r[system.mates[c]].max() - slack
        ]
        tight.sort(key=lambda c: (x.pl[c] != first, x.depth[x.pl[c]]))
        if not tight:
            raise NotUnique(f"flow {f} ended with no bottleneck")
        options.append(tight)
    for pick in islice(product(*options), MAX_SEARCH):
        got = system.rates(np.array(pick, dtype=np.int64))
        if got is not None:
            return np.maximum(got, 0.0)
    raise NotUnique("the filling did not end at a fixed point of the rule")
