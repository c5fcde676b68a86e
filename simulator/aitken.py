"""The jump every few rounds of the allocator's fixed point (numba), shared by the
allocator (``allocator_kernel``) and the fast path (``fast_fill``).

Where the rounds settle slowly (a queue below another of the same part on a link: its
capacity comes from the last round's use), every queue's use moves towards the fixed
point by a nearly constant ratio a round, a geometric sequence whose limit Aitken's
delta-squared gives from three terms. After every ``EVERY``-th round that did not
settle, each queue of a cycle's parts (the queues whose own use comes back to them; the
others are filled exactly from theirs) jumps there where its last two steps have one
sign and the
second is clearly the shorter (``RATIO``: equal steps, a line, are common where rates
move by fixed fractions, and rounding must not decide whether they jump); the next
round starts from it. The test that the rounds settled
is unchanged, so a settled allocation is a fixed point as before; the jumps change only
the path (and so where it ends, where fixed points are not unique, and how often the
rounds run out).
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.kernel import kernel

EVERY = 3  # rounds from one jump to the next: three terms of a sequence
RATIO = 0.9  # the largest ratio of two steps jumped from (1: a line, no limit)


@kernel
def jump(
    u: np.ndarray, h0: np.ndarray, h1: np.ndarray, top: np.ndarray, tol: float,
    only: np.ndarray, moved: np.ndarray,
) -> None:  # fmt: skip
    """Each queue's use ``u`` (after ``h0``, then ``h1``) moved to the limit of the
    geometric sequence of its last two steps, ``u + d1 r / (1 - r)`` with ``d1 = u -
    h1``, ``r = d1 / (h1 - h0)``, where ``0 < r <= RATIO`` and the last step is more
    than ``tol`` (steps the rounds' arithmetic can tell apart); kept within ``[0,
    top]`` (the most the queue's link can carry of it). Only the queues ``only`` (those
    of the parts in a cycle, the ones whose own use comes back to them) jump; ``moved``
    is set where one moved."""
    for v in range(len(u)):
        if not only[v]:
            continue
        d0 = h1[v] - h0[v]
        d1 = u[v] - h1[v]
        if d0 * d1 > 0.0 and tol < abs(d1) <= RATIO * abs(d0):
            r = d1 / d0
            x = min(max(u[v] + d1 * r / (1.0 - r), 0.0), top[v])
            if x != u[v]:
                u[v] = x
                moved[v] = True
