"""The fixed point the fabric takes where the per-link model has more than one.

The per-link model (:mod:`simulator.allocator`: strict priority between a link's
queues, max-min within a queue) can have a continuum of fixed points where a pooled
queue closes a priority cycle. Two flows ``a``, ``b`` from one NIC, ``a`` above ``b``
there, both in one queue of the receiver's switch port, every link at rate 1: every
``a = x``, ``b = 1 - x`` with ``x`` in [1/2, 1] is a fixed point. Real TCP settles at
``x = 1`` (``grouper bench pooled-queue``): nothing reaches the port faster than the
NIC sends, so the NIC's queue builds and the port's never does, and the NIC's priority
decides.

**The rule.** Where a link's constraint and the constraint of a link downstream of it
bind together, the upstream one is the bottleneck. In the model's own words: the fixed
point of the per-link model in which every link's capacity ``c`` is raised to
``c x (1 + eps x depth)``, in the limit ``eps -> 0``, where a link's depth is its hop
from the senders (a NIC 1, a leaf's uplink 2, a spine's downlink 3, a leaf's port
toward a host 4; on a big switch the port toward the receiver is 2). Where the model's
fixed point is unique the rule changes nothing.

:func:`fabric_rates` computes that fixed point by enumeration: a fixed point gives
every flow a bottleneck, a virtual link (link, queue) whose prefix (the rates of the
link's flows in that queue and above) fills the link and where the flow has the
largest rate of its queue. For each choice of bottlenecks the rates solve a linear
system, carried as ``v + eps w``, and are kept when they are feasible and every flow is
largest at its bottleneck, compared in that order (``v`` first, then ``w``). The cost
is exponential in the flows: this is the reference for small instances (the
pooled-queue bench's cases, property tests), the definition a one-pass rule in the
engines is checked against, not an engine.
"""

from __future__ import annotations

from itertools import product
from typing import NamedTuple

import numpy as np

MAX_CHOICES = 200_000  # bottleneck choices enumerated at most (the product of path lengths)


class NotUnique(ValueError):
    """The perturbed model has no fixed point, or more than one, on this instance."""


def fabric_rates(
    pf: np.ndarray,
    pl: np.ndarray,
    pq: np.ndarray,
    capacity: np.ndarray,
    depth: np.ndarray,
) -> np.ndarray:
    """The rule's rates of the flows ``0..max(pf)``, given one entry per link crossing:
    flow ``pf``, link ``pl`` and the flow's queue ``pq`` on that link (0 highest), each
    link's ``capacity`` and ``depth`` (hop from the senders, 1 for a NIC).

    Raises :class:`NotUnique` where the enumeration finds no fixed point or several
    that differ, and ``ValueError`` on an instance too large to enumerate."""
    pf, pl, pq = (np.asarray(a, dtype=np.int64) for a in (pf, pl, pq))
    cap = np.asarray(capacity, dtype=float)
    dep = np.asarray(depth, dtype=float)
    n = int(pf.max(initial=-1)) + 1
    paths = [np.flatnonzero(pf == f) for f in range(n)]
    if any(len(p) == 0 for p in paths):
        raise ValueError("every flow 0..max(pf) needs at least one link crossing")
    if np.prod([float(len(p)) for p in paths]) > MAX_CHOICES:
        raise ValueError(f"more than {MAX_CHOICES} bottleneck choices: too large to enumerate")
    system = System.of(pf, pl, pq, cap, dep, n)
    found: list[np.ndarray] = []
    for choice in product(*paths):
        r = system.rates(np.array(choice))
        if r is not None and not any(np.allclose(r, g, atol=system.tol * 1e3) for g in found):
            found.append(r)
    if len(found) != 1:
        raise NotUnique(f"{len(found)} fixed points of the perturbed model, not one")
    return np.maximum(found[0], 0.0)


class System(NamedTuple):
    """An instance's crossings as the linear system of a choice of bottlenecks."""

    pf: np.ndarray
    pl: np.ndarray
    pq: np.ndarray
    prefix: np.ndarray  # [c]: the flows in crossing c's queue or above it on its link
    mates: np.ndarray  # [c]: the flows in that queue
    bound: np.ndarray  # each crossing's prefix limit, v and w (rows)
    tol: float

    @staticmethod
    def of(
        pf: np.ndarray, pl: np.ndarray, pq: np.ndarray, cap: np.ndarray, dep: np.ndarray, n: int
    ) -> System:
        prefix = np.zeros((len(pf), n))
        mates = np.zeros((len(pf), n), dtype=bool)
        for c in range(len(pf)):
            prefix[c, pf[(pl == pl[c]) & (pq <= pq[c])]] = 1.0
            mates[c, pf[(pl == pl[c]) & (pq == pq[c])]] = True
        bound = np.stack([cap[pl], cap[pl] * dep[pl]])
        tol = 1e-9 * max(float(cap.max(initial=1.0)), 1.0) * max(float(dep.max(initial=1.0)), 1.0)
        return System(pf, pl, pq, prefix, mates, bound, tol)

    def rates(self, choice: np.ndarray) -> np.ndarray | None:
        """The rates (``v``) where each flow's bottleneck is crossing ``choice[f]``, or
        None where that system is singular or its answer not a fixed point."""
        r = _solve(choice, self.pf, self.pl, self.pq, self.prefix, self.bound)
        ok = r is not None and _is_fixed_point(
            r, choice, self.prefix, self.mates, self.bound, self.tol
        )
        return r[0] if ok else None


def _solve(
    choice: np.ndarray, pf: np.ndarray, pl: np.ndarray, pq: np.ndarray,
    prefix: np.ndarray, bound: np.ndarray,
) -> np.ndarray | None:  # fmt: skip
    """Rates (rows v and w) with each flow's chosen crossing's prefix full and the flows
    that chose one virtual link equal; None where that system is singular."""
    n = len(choice)
    a = np.zeros((n, n))
    b = np.zeros((2, n))
    row = 0
    groups: dict[tuple[int, int], list[int]] = {}
    for f, c in enumerate(choice):
        groups.setdefault((int(pl[c]), int(pq[c])), []).append(f)
    for flows in groups.values():
        c = choice[flows[0]]
        a[row], b[:, row] = prefix[c], bound[:, c]
        row += 1
        for g in flows[1:]:
            a[row, g], a[row, flows[0]] = 1.0, -1.0
            row += 1
    if np.linalg.matrix_rank(a) < n:
        return None
    return np.linalg.solve(a, b.T).T


def _is_fixed_point(
    r: np.ndarray, choice: np.ndarray, prefix: np.ndarray, mates: np.ndarray,
    bound: np.ndarray, tol: float,
) -> bool:  # fmt: skip
    """Rates not negative, every prefix within its link, every flow largest in its queue
    at its bottleneck: each compared as ``v + eps w`` for a small ``eps``."""
    if not all(_at_most(0.0, 0.0, r[0, f], r[1, f], tol) for f in range(r.shape[1])):
        return False
    used = prefix @ r.T  # (crossings, 2)
    if not all(_at_most(*used[c], *bound[:, c], tol) for c in range(len(used))):
        return False
    return all(
        _at_most(*r[:, g], *r[:, f], tol)
        for f, c in enumerate(choice)
        for g in np.flatnonzero(mates[c])
    )


def _at_most(x: float, xw: float, y: float, yw: float, tol: float) -> bool:
    """``x + eps xw <= y + eps yw`` for every small enough ``eps > 0``."""
    if x < y - tol:
        return True
    if x > y + tol:
        return False
    return xw <= yw + tol
