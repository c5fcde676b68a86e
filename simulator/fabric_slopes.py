"""The slopes of one piece of ``simulator.fabric_fill``'s filling.

On a piece some links are full. On each, the flows of its binding queue (its lowest
queue still moving) with the largest rate are its *candidates*, and so are the flows
of every queue below it, all at rate 0 (*held*: their slope is at least 0). Every flow
that is not a candidate anywhere rises at slope 1. A candidate's slope is the model's
own rule one derivative down: it has a bottleneck, either none (it rises at 1) or one
of its full links where the slopes of its queue and the queues above add up to 0 (that
prefix stays full) and no candidate of its queue rises faster (max-min in the queue);
no such prefix of a full link adds up to more than 0 (none overfills), and no slope
exceeds 1.

That is a feasibility problem with one choice per candidate (its bottleneck), solved
as a mixed-integer program (scipy's HiGHS): binaries pick the bottlenecks, big-M rows
switch their equalities on, and the cost prefers upstream bottlenecks (the rule's tie:
the upstream link binds first). Each candidate owned by its most upstream full link is
tried first, the program only where that assignment gets something wrong. The answer's
slopes are then made exact: each owning (link, queue)'s slope solves its equation
(closest to the program's where they leave a choice), checked again.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from grouper.simulator.fabric_rule import NotUnique

FREE = -1  # a candidate's owner where it has none: it rises at slope 1
SLACK = 1e-9  # the tolerance the slopes are checked with


class Piece:
    """A piece's full links and the roles its flows have on them."""

    def __init__(self, pf: np.ndarray, pq: np.ndarray, on: list[np.ndarray],
                 depth: np.ndarray, binding: dict[int, tuple[int, float]],
                 cands: list[list[int]], held: np.ndarray) -> None:  # fmt: skip
        self.depth, self.cands, self.held = depth, cands, held
        self.n = len(cands)
        self.var = [f for f in range(self.n) if cands[f]]
        self.queue: dict[tuple[int, int], int] = {}  # (flow, full link): its queue there
        self.prefix: dict[tuple[int, int], list[int]] = {}  # (link, queue): flows there and above
        for lk, (b, _) in binding.items():
            flows, queues = pf[on[lk]], pq[on[lk]]
            for f, q in zip(flows.tolist(), queues.tolist(), strict=True):
                self.queue[f, lk] = q
            for q in np.unique(queues[queues >= b]).tolist():
                self.prefix[lk, q] = flows[queues <= q].tolist()

    def key(self, f: int, lk: int) -> tuple[int, int]:
        """The (link, queue) where flow ``f`` is a candidate of link ``lk``."""
        return lk, self.queue[f, lk]

    def mates(self, f: int, lk: int) -> list[int]:
        """The candidates of ``f``'s queue at ``lk`` (``f`` among them)."""
        k = self.key(f, lk)
        return [g for g in self.var if lk in self.cands[g] and self.key(g, lk) == k]


def slopes(piece: Piece) -> tuple[np.ndarray, np.ndarray]:
    """The piece's slopes and each flow's owner (its bottleneck link, or FREE)."""
    owner = np.full(piece.n, FREE, dtype=np.int64)
    for f in piece.var:
        owner[f] = piece.cands[f][0]
    got = _exact(piece, owner)
    if got is not None:
        return got, owner
    owner, guess = _by_program(piece)
    got = _exact(piece, owner, guess)
    if got is None:
        raise NotUnique("the bottlenecks the program chose give no exact slopes")
    return got, owner


def _exact(
    piece: Piece, owner: np.ndarray, guess: dict[tuple[int, int], float] | None = None
) -> np.ndarray | None:
    """The slopes where the candidates a (link, queue) owns share the slope that keeps
    its prefix full, closest to ``guess`` where that leaves a choice; None where those
    equations have no solution or the slopes get something wrong."""
    keys = sorted({piece.key(f, int(owner[f])) for f in piece.var if owner[f] >= 0})
    col = {k: i for i, k in enumerate(keys)}
    of = {f: col[piece.key(f, int(owner[f]))] for f in piece.var if owner[f] >= 0}
    a = np.zeros((len(keys), len(keys)))
    b = np.zeros(len(keys))
    for i, k in enumerate(keys):
        for f in piece.prefix[k]:
            if f in of:
                a[i, of[f]] += 1.0
            else:
                b[i] -= 1.0
    s = np.ones(piece.n)
    if keys:
        start = np.array([(guess or {}).get(k, 0.0) for k in keys])
        step, *_ = np.linalg.lstsq(a, b - a @ start, rcond=None)
        sigma = start + step
        if np.abs(a @ sigma - b).max() > SLACK:
            return None
        for f, i in of.items():
            s[f] = sigma[i]
    return s if _right(piece, s, owner) else None


def _right(piece: Piece, s: np.ndarray, owner: np.ndarray) -> bool:
    """No prefix of a full link overfills, no slope above 1, none below 0 at rate 0,
    every owned candidate as fast as the fastest of its queue's."""
    if s.max(initial=0.0) > 1.0 + SLACK or (s[piece.held] < -SLACK).any():
        return False
    if any(s[flows].sum() > SLACK for flows in piece.prefix.values()):
        return False
    return all(
        s[g] <= s[f] + SLACK
        for f in piece.var
        if owner[f] >= 0
        for g in piece.mates(f, int(owner[f]))
    )


def _by_program(piece: Piece) -> tuple[np.ndarray, dict[tuple[int, int], float]]:
    """Bottlenecks (and each owning (link, queue)'s slope) from the mixed-integer
    program: columns are the candidates' slopes, then one binary per (candidate, link
    or FREE)."""
    var, n = piece.var, len(piece.var)
    col = {f: i for i, f in enumerate(var)}
    picks = [(f, lk) for f in var for lk in [*piece.cands[f], FREE]]
    big = 2.0 * (piece.n + 1)
    rows: list[dict[int, float]] = []
    lo: list[float] = []
    hi: list[float] = []

    def add(row: dict[int, float], low: float, high: float) -> None:
        rows.append(row), lo.append(low), hi.append(high)

    load: dict[tuple[int, int], tuple[dict[int, float], float]] = {}
    for k, flows in piece.prefix.items():  # no prefix of a full link overfills
        row: dict[int, float] = {}
        for f in flows:
            if f in col:
                row[col[f]] = row.get(col[f], 0.0) + 1.0
        load[k] = (row, float(len(flows) - sum(row.values())))
        add(row, -np.inf, -load[k][1])
    for f in var:  # one bottleneck each
        add({n + j: 1.0 for j, (g, _) in enumerate(picks) if g == f}, 1.0, 1.0)
    for j, (f, lk) in enumerate(picks):
        if lk == FREE:  # rises at 1
            add({col[f]: 1.0, n + j: -big}, 1.0 - big, np.inf)
            continue
        row, rest = load[piece.key(f, lk)]  # its prefix stays full
        add({**row, n + j: -big}, -rest - big, np.inf)
        for g in piece.mates(f, lk):  # and none of its queue's candidates is faster
            if g != f:
                add({col[f]: 1.0, col[g]: -1.0, n + j: -big}, -big, np.inf)
    matrix = sparse.lil_matrix((len(rows), n + len(picks)))
    for i, row in enumerate(rows):
        for c, v in row.items():
            matrix[i, c] = v
    top = float(piece.depth.max(initial=1.0)) + 1.0
    cost = np.r_[np.zeros(n), [piece.depth[lk] if lk >= 0 else top for _, lk in picks]]
    low = np.array([0.0 if piece.held[f] else -big for f in var])
    got = milp(
        cost,
        constraints=LinearConstraint(matrix.tocsr(), lo, hi),
        integrality=np.r_[np.zeros(n), np.ones(len(picks))],
        bounds=Bounds(np.r_[low, np.zeros(len(picks))], np.ones(n + len(picks))),
    )
    if got.x is None:
        raise NotUnique("no slopes keep every full link within its capacity")
    owner = np.full(piece.n, FREE, dtype=np.int64)
    guess: dict[tuple[int, int], float] = {}
    for j, (f, lk) in enumerate(picks):
        if got.x[n + j] > 0.5:
            owner[f] = lk
            if lk >= 0:
                guess[piece.key(f, lk)] = got.x[col[f]]
    return owner, guess
