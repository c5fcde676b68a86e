"""The rule's fixed point (``simulator.fabric_rule``) by progressive filling, in one pass.

Every flow starts at 0 and the rates move along straight pieces until none can move.
Capacities are the rule's perturbed ones, ``c x (1 + DELTA x depth)``, so that where a
link and a link downstream of it would fill together the upstream one fills first. On
every piece each flow has a slope:

* a link is *full* when its flows use its capacity; its *binding queue* is its lowest
  queue with a flow moving data, its *candidates* the flows of that queue with the
  largest rate; flows in queues below the binding one have rate 0 and stay there;
* a candidate is *owned* by its most upstream full link where it is one; the
  candidates a link owns share one slope, the one that keeps the link full (its flows'
  slopes add up to 0): the flows above them on that link take what they need first;
* every other flow rises at slope 1.

The slopes of the owned candidates solve one linear equation per owning link. Where
that answer is wrong (it overfills a full link, lets a candidate outrun the ones its
link owns, gives a link's candidates a slope above 1, or the equations disagree), it is
mended where it is wrong: the link takes its candidates, or lets them go to their next
link downstream (else free), a link that let go and then overfills keeps them; where
mending finds nothing, the sets of links it touched are tried as the ones that let go,
fewest first, then each candidate's owner on its own (``MAX_SEARCH`` of each at most,
then ``NotUnique``). A piece ends when a link fills, a rate falls to 0, or a flow
catches up with the candidates of its queue. The end is a fixed point of the perturbed
model; the bottleneck each flow ended at then gives the exact rates (``fabric_rule``'s
linear system, ``eps -> 0``), checked to be the rule's fixed point. Where the rule's
fixed point is unique, a path that ends at a fixed point ends at it, so the choices
made on the way do not change the answer.
"""

from __future__ import annotations

from itertools import combinations, islice, product

import numpy as np
from numpy.typing import ArrayLike

from grouper.simulator.fabric_rule import NotUnique, System

DELTA = 1e-7  # the capacities' perturbation per hop of depth
MAX_PIECES = 10_000
MAX_SEARCH = 4_096  # assignments tried at most in one search
FREE = -1


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
    """Each flow's full links where it is a candidate (upstream first); for each flow
    held at 0 below a full link's binding queue that link (-1 for the others); each
    full link's binding queue and the largest rate in it."""
    cands: list[list[int]] = [[] for _ in range(x.n)]
    held = np.full(x.n, -1, dtype=np.int64)
    binding: dict[int, tuple[int, float]] = {}
    for lk in np.flatnonzero(full):
        cs = x.on[lk]
        flows, queues = x.pf[cs], x.pq[cs]
        moving = r[flows] > x.tol
        if not moving.any():
            continue
        b = queues[moving].max()
        held[flows[queues > b]] = lk
        inq = flows[queues == b]
        top = r[inq].max()
        binding[int(lk)] = (int(b), float(top))
        for f in inq[r[inq] >= top - x.tol]:
            cands[f].append(int(lk))
    for f in range(x.n):
        cands[f].sort(key=lambda lk: x.depth[lk])
    return cands, held, binding


def _slopes_of(
    x: _Instance, owner: np.ndarray, held: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Slopes for one assignment of owners (a link, or FREE): the owned candidates of
    each owning link share the slope that keeps it full. None where that has no
    solution. Also each owning link's slope (NaN elsewhere)."""
    owners = np.unique(owner[owner >= 0])
    col = {int(lk): i for i, lk in enumerate(owners)}
    a = np.zeros((len(owners), len(owners)))
    b = np.zeros(len(owners))
    for i, lk in enumerate(owners):
        for c in x.on[lk]:
            f = x.pf[c]
            if held[f]:
                continue
            if owner[f] >= 0:
                a[i, col[int(owner[f])]] += 1.0
            else:
                b[i] -= 1.0
    sigma = np.full(x.nl, np.nan)
    if len(owners):
        sol, *_ = np.linalg.lstsq(a, b, rcond=None)
        if np.abs(a @ sol - b).max() > 1e-9:
            return None
        sigma[owners] = sol
    s = np.where(held, 0.0, 1.0)
    for f in range(x.n):
        if not held[f] and owner[f] >= 0:
            s[f] = sigma[owner[f]]
    return s, sigma


def _violation(x: _Instance, s: np.ndarray, sigma: np.ndarray, full: np.ndarray,
               cands: list[list[int]], owner: np.ndarray) -> tuple[int, int] | None:  # fmt: skip
    """The first thing these slopes get wrong, as (what, link): ``OVER`` a full link
    they overfill, ``FAST`` an owning link whose candidates would outrun free flows,
    ``OUTRUN`` a link one of whose candidates outruns the ones it owns; None if none."""
    eps = 1e-9
    for lk in np.flatnonzero(full):
        if s[x.pf[x.on[lk]]].sum() > eps:
            return OVER, int(lk)
    for lk in np.flatnonzero(sigma > 1.0 + eps):
        return FAST, int(lk)
    for f in range(x.n):
        for lk in cands[f]:
            if not np.isnan(sigma[lk]) and s[f] > sigma[lk] + eps and owner[f] != lk:
                return OUTRUN, int(lk)
    return None


OVER, FAST, OUTRUN = 0, 1, 2
MAX_REPAIRS = 64


def _slopes(
    x: _Instance, full: np.ndarray, cands: list[list[int]], held_at: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The piece's slopes, and each flow's owner (a link or FREE). From the assignment
    upstream first, each wrong thing is mended where it is: a full link the slopes
    overfill, or one a candidate of which outruns its owned ones, takes its candidates;
    a link whose candidates would outrun free flows lets them go (to their next link
    downstream, else free)."""
    held = held_at >= 0
    owner = np.array([c[0] if c and not held[f] else FREE for f, c in enumerate(cands)])
    released = np.zeros(x.nl, dtype=bool)
    pinned = np.zeros(x.nl, dtype=bool)  # let go once, then overfilled: keeps its own
    touched: list[int] = []  # the links mending changed

    def release(own: np.ndarray, lk: int, also: list[int]) -> np.ndarray:
        own = own.copy()
        for f in range(x.n):
            if own[f] == lk or f in also:
                rest = [k for k in cands[f] if not released[k] and k != lk]
                own[f] = rest[0] if rest else FREE
        return own

    for _ in range(MAX_REPAIRS):
        got = _slopes_of(x, owner, held)
        if got is None:  # the owning links' equations disagree: one of them lets go,
            # one after which nothing is wrong if there is one
            solvable = []
            owning = set(owner[owner >= 0].tolist()) - set(np.flatnonzero(pinned).tolist())
            for lk in sorted(owning, key=lambda k: x.depth[k]):
                trial = release(owner, lk, [])
                tried = _slopes_of(x, trial, held)
                if tried is not None:
                    solvable.append((_violation(x, *tried, full, cands, trial) is not None, lk))
            if not solvable:
                break
            lk = min(solvable)[1]
            touched.append(lk)
            owner = release(owner, lk, [])
            released[lk] = True
            continue
        bad = _violation(x, *got, full, cands, owner)
        if bad is None:
            return got[0], owner
        what, lk = bad
        touched.append(lk)
        mine = [f for f in range(x.n) if lk in cands[f] and not held[f]]
        if what == FAST:
            released[lk] = True
            owner = release(owner, lk, [])
        elif released[lk] and pinned[lk]:
            break
        else:  # a link let go that must not: it takes its candidates, another lets go
            released[lk], pinned[lk] = False, released[lk]
            owner[mine] = lk
    return _search(x, full, cands, held, touched)


def _search(x: _Instance, full: np.ndarray, cands: list[list[int]], held: np.ndarray,
            touched: list[int]) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """Where mending did not settle: which of the links it touched let go, fewest first
    (every other link with candidates owns them, each candidate by its most upstream
    owning link), then each candidate's owner (or none) on its own, upstream first;
    ``MAX_SEARCH`` of each at most. The first with nothing wrong."""
    links = sorted(set(touched), key=lambda k: x.depth[k])
    sets = (gone for size in range(len(links) + 1) for gone in combinations(links, size))
    for gone in islice(sets, MAX_SEARCH):
        owner = np.array(
            [next((k for k in c if k not in gone), FREE) if not held[f] else FREE
             for f, c in enumerate(cands)],
            dtype=np.int64,
        )  # fmt: skip
        got = _slopes_of(x, owner, held)
        if got is not None and _violation(x, *got, full, cands, owner) is None:
            return got[0], owner
    choices = [c + [FREE] if c and not held[f] else [FREE] for f, c in enumerate(cands)]
    for pick in islice(product(*choices), MAX_SEARCH):  # each candidate on its own
        owner = np.array(pick, dtype=np.int64)
        got = _slopes_of(x, owner, held)
        if got is not None and _violation(x, *got, full, cands, owner) is None:
            return got[0], owner
    raise NotUnique("no slopes keep every full link within its capacity")


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
        cands, held_at, binding = _roles(x, r, full)
        s, owner = _slopes(x, full, cands, held_at)
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
    full, its rate the largest of its queue): its owner (or the link holding it at 0)
    is tried first, the others where that system is singular."""
    load = np.bincount(x.pl, weights=r[x.pf], minlength=x.nl)
    _, held, _ = _roles(x, r, load >= x.cap - x.tol)
    system = System.of(x.pf, x.pl, x.pq, x.cap0, x.depth, x.n)
    used = system.prefix @ r
    slack = 1e-3 * DELTA * max(float(x.cap0.max(initial=1.0)), 1.0)
    options = []
    for f in range(x.n):
        first = int(held[f]) if held[f] >= 0 else int(owner[f])
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
