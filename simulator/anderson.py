"""The extrapolation of the allocator's rounds (numba), shared by the allocator
(``allocator_kernel``) and the fast path (``fast_fill``): Anderson's mixing on the use
of a cycle's queues.

Where the rounds settle slowly (a queue below another of the same part on a link: its
capacity comes from the last round's use), the use of the cycle's queues moves towards
the fixed point round after round, along directions that recur: on one piece of the
model's piecewise-linear map the rounds are an affine map ``x -> A x + b``. After every
round that did not settle, the use of each queue of a cycle's parts (``only``: the
queues whose own use comes back to them; the others are filled exactly from theirs)
moves to Anderson's extrapolation (type II) from the last ``MEMORY + 1`` rounds (their
``MEMORY`` differences): the combination of their results whose residuals (result less
start) are least in the least-squares sense. On an affine piece whose map's minimal
polynomial has degree at most ``MEMORY`` (the use comes back through few directions)
it is the fixed point itself. The next round starts from it; a queue moves only by
more than ``tol`` (a smaller step is rounding and would only have its part filled
again), and stays within ``[0, top]``. A move further than ``REACH`` residuals is not
taken (the round's own result stands; ``REACH_LATE`` once the rounds have run long),
and the history starts again when the queues of cycles change. The test that the
rounds settled is unchanged, so a settled allocation is a fixed point as before; the
extrapolation changes only the path (and so where it ends, where fixed points are not
unique, and how often the rounds run out).
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.kernel import kernel

MEMORY = 5  # rounds of history: the directions the extrapolation combines
DROP = 1e-3  # relative: a direction (least-squares row) shorter than this after the ones
#              before it are taken out is dropped, as nearly dependent on them
REACH = 10.0  # the longest extrapolation, in plain steps (its largest residual): as far
#               as a geometric sequence of ratio 0.9 goes; a longer one is not taken
REACH_LATE = 1000.0  # the same for the rounds past the first try of the exact end (the
#                      engines' choice): where the use still comes closer by under 1% a
#                      round, the fixed point is hundreds of plain steps away


@kernel
def history(nv: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """An empty history for ``nv`` queues: each remembered round's start and result
    (``MEMORY + 1`` rows, a ring: a row is written before it is read), the queues it
    was kept for, and [rounds held, next row]. The engines make it with ``nv = 0``
    (nothing to allocate where the first round settles) and again for their queues at
    the first round that did not."""
    return (
        np.empty((MEMORY + 1, nv)), np.empty((MEMORY + 1, nv)), np.zeros(nv, np.bool_),
        np.zeros(2, np.int64),
    )  # fmt: skip


@kernel
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """A dot product summed in index order (as the reference's, not BLAS's blocks)."""
    t = 0.0
    for i in range(len(a)):
        t += a[i] * b[i]
    return t


@kernel
def least_squares(a: np.ndarray, b: np.ndarray, floor: float) -> np.ndarray:
    """The ``g`` that minimises ``|b - g a|`` for the rows of ``a`` (the directions;
    modified Gram-Schmidt: a row that adds less than ``DROP`` of its length to the ones
    before it, or no more than ``floor``, gets 0: rounding is no direction)."""
    m = a.shape[0]
    q, r = a.copy(), np.zeros((m, m))
    keep = np.zeros(m, np.bool_)
    for c in range(m):
        full = np.sqrt(_dot(a[c], a[c]))
        for p in range(c):
            if keep[p]:
                r[p, c] = _dot(q[p], q[c])
                q[c] -= r[p, c] * q[p]
        left = np.sqrt(_dot(q[c], q[c]))
        if left > DROP * full and left > floor:
            keep[c] = True
            r[c, c] = left
            q[c] /= left
    g = np.zeros(m)
    for c in range(m - 1, -1, -1):
        if keep[c]:
            t = _dot(q[c], b)
            for p in range(c + 1, m):
                t -= r[c, p] * g[p]
            g[c] = t / r[c, c]
    return g


@kernel
def _remember(
    u: np.ndarray, x: np.ndarray, only: np.ndarray, xs: np.ndarray, gs: np.ndarray,
    mask: np.ndarray, held: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """The round that started from ``x`` and gave ``u`` kept (the history started
    again where the queues ``only`` are not those of the rounds before); its rows in
    the ring, oldest first."""
    if not np.array_equal(mask, only):
        mask[:] = only
        held[0] = 0
        held[1] = 0
    slots = xs.shape[0]
    s = held[1]
    xs[s, :] = x
    gs[s, :] = u
    held[1] = (s + 1) % slots
    held[0] = min(held[0] + 1, slots)
    rows = np.empty(held[0], np.int64)
    for i in range(held[0]):
        rows[i] = (held[1] - held[0] + i) % slots
    return rows


@kernel
def extrapolate(
    u: np.ndarray, x: np.ndarray, only: np.ndarray, xs: np.ndarray, gs: np.ndarray,
    mask: np.ndarray, held: np.ndarray, top: np.ndarray, tol: float, moved: np.ndarray,
    reach: float,
) -> None:  # fmt: skip
    """The round that started from use ``x`` and gave ``u`` remembered (``history``),
    and the use of the queues ``only`` in ``u`` moved to Anderson's extrapolation
    from the rounds remembered, unless that moves further than ``reach`` times the
    largest residual (``REACH``, or ``REACH_LATE``); ``moved`` set where a queue moved."""
    rows = _remember(u, x, only, xs, gs, mask, held)
    m = len(rows) - 1
    idx = np.flatnonzero(only)
    if m == 0 or len(idx) == 0:
        return
    res = np.empty((m + 1, len(idx)))  # each round's result less its start
    for j in range(m + 1):
        for i in range(len(idx)):
            res[j, i] = gs[rows[j], idx[i]] - xs[rows[j], idx[i]]
    if np.max(np.abs(res[m])) <= tol:
        return
    df, dg = np.empty((m, len(idx))), np.empty((m, len(idx)))
    for c in range(m):
        for i in range(len(idx)):
            df[c, i] = res[c + 1, i] - res[c, i]
            dg[c, i] = gs[rows[c + 1], idx[i]] - gs[rows[c], idx[i]]
    gamma = least_squares(df, res[m], tol)
    last = rows[m]
    y = np.empty(len(idx))
    for i in range(len(idx)):
        y[i] = gs[last, idx[i]]
        for c in range(m):
            y[i] -= gamma[c] * dg[c, i]
        y[i] = min(max(y[i], 0.0), top[idx[i]])
    if np.max(np.abs(y - gs[last, idx])) > reach * np.max(np.abs(res[m])):
        return
    for i in range(len(idx)):
        if abs(y[i] - u[idx[i]]) > tol:
            u[idx[i]] = y[i]
            moved[idx[i]] = True
