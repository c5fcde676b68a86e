"""The slopes of one piece of ``simulator.fabric_fill``'s filling.

On a piece some links are full. On each, the flows of its binding queue (its lowest
queue still moving) with the largest rate are its *candidates*; flows of lower queues
are *held* at 0. Every flow that is not a candidate anywhere rises at slope 1 (or stays
at 0, held). A candidate's slope is the model's own rule one derivative down: it has a
bottleneck, either none (it rises at 1) or one of its full links whose flows' slopes
add up to 0 (the link stays full) and where no candidate rises faster than it (max-min
in the binding queue); every full link's slopes add up to at most 0 (no link
overfills), and no slope exceeds 1.

That is a feasibility problem with one choice per candidate (its bottleneck), solved
as a mixed-integer program (scipy's HiGHS): binaries pick the bottlenecks, big-M rows
switch their equalities on, and the cost prefers upstream bottlenecks (the rule's tie:
the upstream link binds first). Candidates owned by the most upstream link where they
are one are tried first, the program only where that assignment gets something wrong.
The answer's slopes are then made exact: those of the owning links solve their
equations (closest to the program's where they leave a choice), checked again.
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

    def __init__(self, pf: np.ndarray, on: list[np.ndarray], depth: np.ndarray,
                 full: np.ndarray, cands: list[list[int]], held: np.ndarray) -> None:  # fmt: skip
        self.pf, self.on, self.depth, self.cands, self.held = pf, on, depth, cands, held
        self.full = np.flatnonzero(full)
        self.n = len(cands)
        self.var = [f for f in range(self.n) if cands[f] and not held[f]]

    def fixed(self) -> np.ndarray:
        """Slopes of the flows that are no candidate: 0 held, 1 the others."""
        return np.where(self.held, 0.0, 1.0)


def slopes(piece: Piece) -> tuple[np.ndarray, np.ndarray]:
    """The piece's slopes and each flow's owner (its bottleneck link, or FREE)."""
    owner = np.full(piece.n, FREE, dtype=np.int64)
    for f in piece.var:
        owner[f] = piece.cands[f][0]
    got = exact(piece, owner)
    if got is not None:
        return got, owner
    owner, guess = _by_program(piece)
    got = exact(piece, owner, guess)
    if got is None:
        raise NotUnique("the bottlenecks the program chose give no exact slopes")
    return got, owner


def exact(piece: Piece, owner: np.ndarray, guess: np.ndarray | None = None) -> np.ndarray | None:
    """The slopes where each owning link's candidates share the slope that keeps it
    full, closest to ``guess`` where that leaves a choice; None where those equations
    have no solution or the slopes get something wrong."""
    owners = np.unique(owner[owner >= 0])
    col = {int(lk): i for i, lk in enumerate(owners)}
    a = np.zeros((len(owners), len(owners)))
    b = np.zeros(len(owners))
    base = piece.fixed()
    for i, lk in enumerate(owners):
        for f in piece.pf[piece.on[lk]]:
            if owner[f] >= 0:
                a[i, col[int(owner[f])]] += 1.0
            else:
                b[i] -= base[f]
    s = base.copy()
    if len(owners):
        start = np.zeros(len(owners)) if guess is None else guess[owners]
        step, *_ = np.linalg.lstsq(a, b - a @ start, rcond=None)
        sigma = start + step
        if np.abs(a @ sigma - b).max() > SLACK:
            return None
        s[owner >= 0] = sigma[[col[int(lk)] for lk in owner[owner >= 0]]]
    return s if _right(piece, s, owner) else None


def _right(piece: Piece, s: np.ndarray, owner: np.ndarray) -> bool:
    """No full link overfills, no slope above 1, every owned candidate as fast as its
    link's fastest candidate."""
    if s.max(initial=0.0) > 1.0 + SLACK:
        return False
    for lk in piece.full:
        if s[piece.pf[piece.on[lk]]].sum() > SLACK:
            return False
    for f in piece.var:
        lk = owner[f]
        if lk >= 0 and any(s[g] > s[f] + SLACK for g in piece.var if lk in piece.cands[g]):
            return False
    return True


def _by_program(piece: Piece) -> tuple[np.ndarray, np.ndarray]:
    """Bottlenecks (and each owning link's slope, by link) from the mixed-integer
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

    load: dict[int, tuple[dict[int, float], float]] = {}
    base = piece.fixed()
    for lk in piece.full:  # a full link never overfills
        row: dict[int, float] = {}
        rest = 0.0
        for f in piece.pf[piece.on[lk]]:
            if f in col:
                row[col[f]] = row.get(col[f], 0.0) + 1.0
            else:
                rest += base[f]
        load[int(lk)] = (row, rest)
        add(row, -np.inf, -rest)
    for f in var:  # one bottleneck each
        add({n + j: 1.0 for j, (g, _) in enumerate(picks) if g == f}, 1.0, 1.0)
    for j, (f, lk) in enumerate(picks):
        if lk == FREE:  # rises at 1
            add({col[f]: 1.0, n + j: -big}, 1.0 - big, np.inf)
            continue
        row, rest = load[lk]  # the link stays full
        add({**row, n + j: -big}, -rest - big, np.inf)
        for g in var:  # and none of its candidates is faster
            if g != f and lk in piece.cands[g]:
                add({col[f]: 1.0, col[g]: -1.0, n + j: -big}, -big, np.inf)
    matrix = sparse.lil_matrix((len(rows), n + len(picks)))
    for i, row in enumerate(rows):
        for c, v in row.items():
            matrix[i, c] = v
    top = float(piece.depth.max(initial=1.0)) + 1.0
    cost = np.r_[np.zeros(n), [piece.depth[lk] if lk >= 0 else top for _, lk in picks]]
    got = milp(
        cost,
        constraints=LinearConstraint(matrix.tocsr(), lo, hi),
        integrality=np.r_[np.zeros(n), np.ones(len(picks))],
        bounds=Bounds(np.r_[np.full(n, -big), np.zeros(len(picks))], np.ones(n + len(picks))),
    )
    if got.x is None:
        raise NotUnique("no slopes keep every full link within its capacity")
    owner = np.full(piece.n, FREE, dtype=np.int64)
    guess = np.zeros(len(piece.depth))
    for j, (f, lk) in enumerate(picks):
        if got.x[n + j] > 0.5:
            owner[f] = lk
            if lk >= 0:
                guess[lk] = got.x[col[f]]
    return owner, guess
