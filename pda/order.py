"""Primal-dual ordering of stages (grouper paper, Section III-C, Algorithm 1).

The algorithm fills positions from the last (``l``) to the first. At each step it takes
the most loaded port ``lambda`` (remaining load of unplaced stages), places last the
candidate stage with the minimum ratio ``w / L_lambda`` (adjusted weight over load on
that port), sets ``rho = beta_{lambda, M}`` to that ratio, and lowers every unplaced
stage's weight by ``rho * L_lambda``.

Rules this implementation makes explicit (see docs/explanation/pda-adadual.md):

* **Weights** (lines 3-11): ``alpha_k = 1 - (1/2)^k`` on the stage's most loaded port,
  ``w_k = 1 + alpha_{k+1} - alpha_k = 1 + (1/2)^(k+1)``; ``alpha_{K+1}`` follows the same
  formula, so the last stage is not special. ``k`` is the stage's number in its cojob,
  which stays the same when earlier stages have finished.
* **Stage order** (chains): only the *last unplaced* stage of each cojob is a candidate
  for the current (backward) position, so a cojob's stages keep their own order. Other
  unplaced stages still have their weights lowered; their adjusted weights can then go
  negative, which is where the multi-stage order departs from Lemma 2's dual
  feasibility (single-stage instances are untouched by the rule).
* **Ties**: the bottleneck port is the lowest port index among equally loaded ports
  (ingress ports of hosts in list order, then egress ports). Among tied candidates
  (adjusted weights within ``WEIGHT_TOL`` of the largest weight of zero) the one with
  the larger tie key (by default: the later cojob in input order, i.e. later arrival)
  is placed later.
* **No load on the bottleneck port**: when no candidate loads the most loaded port,
  the most loaded port that some candidate does load is used instead.
* **No load at all**: a candidate with zero total load needs no bandwidth; it is placed
  at the current backward position at once (its ``rho`` is 0), which frees its
  predecessor to compete.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from grouper.pda.snapshot import Snapshot

# Two candidates tie when their adjusted weights after the step differ from zero by
# less than this share of the instance's largest weight: weights are reduced by
# subtraction, so exact ties leave residues of order eps x weight (a relative test on
# the ratio fails there: when the tied weights are all 0 its tolerance is 0 too).
WEIGHT_TOL = 1e-9


@dataclass
class OrderResult:
    """``order[i]`` is the row placed at position ``i`` (0 = highest priority)."""

    order: np.ndarray
    rho: np.ndarray  # rho at each position (beta of the set placed from there), by position
    port: np.ndarray  # bottleneck port used at each position, -1 for zero-load placements
    min_adjusted_weight: float  # min over steps of the unplaced candidates' adjusted weights
    min_adjusted_weight_all: float  # same over all unplaced stages (chains may go negative)

    def position(self) -> np.ndarray:
        pos = np.empty_like(self.order)
        pos[self.order] = np.arange(len(self.order))
        return pos


def stage_weights(stage_number: np.ndarray) -> np.ndarray:
    """Weights of Algorithm 1, lines 3-11, for 1-based stage numbers."""
    k = np.asarray(stage_number, dtype=float)
    alpha_k = 1.0 - 0.5**k
    alpha_next = 1.0 - 0.5 ** (k + 1.0)
    return 1.0 + alpha_next - alpha_k


def primal_dual_order(
    loads: sparse.spmatrix,
    weights: np.ndarray,
    prev: np.ndarray | None = None,
    tie_key: np.ndarray | None = None,
    *,
    trace: bool = False,
) -> OrderResult:
    """Order the rows of ``loads`` (units x ports) by the reverse primal-dual rule.

    ``prev[s]`` is the row that must come before ``s`` (its chain predecessor) or -1.
    With ``trace`` the minimum adjusted weights are tracked (costs O(n) per step).
    """
    csr = sparse.csr_matrix(loads, dtype=float)
    csr.sum_duplicates()
    n, nports = csr.shape
    csr.eliminate_zeros()  # a stage with no load on a port does not load it
    csc = csr.tocsc()

    w = np.asarray(weights, dtype=float).copy()
    if w.shape != (n,):
        raise ValueError(f"weights: expected shape ({n},), got {w.shape}")
    w_tol = WEIGHT_TOL * max(float(np.abs(w).max(initial=0.0)), 1e-300)
    if prev is None:
        prev = np.full(n, -1, dtype=np.int64)
    if tie_key is None:
        tie_key = np.arange(n, dtype=float)
    tie_key = np.asarray(tie_key, dtype=float)

    port_load = np.asarray(csr.sum(axis=0)).ravel()
    total = np.asarray(csr.sum(axis=1)).ravel()
    scale = max(float(port_load.max(initial=0.0)), 1.0)

    from grouper.pda.order_kernel import order_loop  # numba: imported when first needed

    order, rho_at, port_at, min_w, min_w_all = order_loop(
        csc.indptr.astype(np.int64),
        csc.indices.astype(np.int32),
        csc.data,  # csc is ours: the loop compacts its columns in place
        csr.indptr.astype(np.int64),
        csr.indices.astype(np.int32),
        csr.data,
        w,
        np.ascontiguousarray(prev, dtype=np.int64),
        np.ascontiguousarray(tie_key, dtype=float),
        port_load,
        total,
        w_tol,
        scale * 1e-12,
        trace,
    )
    return OrderResult(order, rho_at, port_at, float(min_w), float(min_w_all))


def warm_up() -> None:
    """Compile the ordering loop now (about 5 s the first time, then loaded from numba's
    disk cache) rather than in the first scheduling cycle."""
    primal_dual_order(sparse.csr_matrix(np.ones((2, 1))), np.ones(2), trace=True)
    primal_dual_order(sparse.csr_matrix(np.ones((2, 1))), np.ones(2))


def completion_cost(loads: sparse.spmatrix, weights: np.ndarray, order: np.ndarray) -> float:
    """``sum_s w_s C_s`` of an order: ``C_s`` is the most any port ``s`` loads carries
    up to and including ``s`` (the order's stages before it first), the weighted
    completion-time bound PDA approximates; rows not in ``order`` count nothing."""
    return completion_costs(loads, weights, [order])[0]


def completion_costs(
    loads: sparse.spmatrix, weights: np.ndarray, orders: list[np.ndarray]
) -> list[float]:
    """:func:`completion_cost` of each order, the loads converted once for all."""
    from grouper.pda.order_kernel import completion_cost as kernel

    csr = sparse.csr_matrix(loads, dtype=float)
    ptr, idx = csr.indptr.astype(np.int64), csr.indices.astype(np.int64)
    w = np.asarray(weights, dtype=float)
    return [
        float(kernel(ptr, idx, csr.data, np.asarray(o, dtype=np.int64), w, csr.shape[1]))
        for o in orders
    ]


def pda_weights(snapshot: Snapshot) -> np.ndarray:
    """PDA's weight of each stage of a snapshot: Algorithm 1's times the stage's own."""
    return stage_weights(snapshot.stage_number) * snapshot.stage_weight


def pda_order(snapshot: Snapshot, *, trace: bool = False) -> OrderResult:
    """PDA over the unfinished stages of a snapshot."""
    return primal_dual_order(
        snapshot.stage_loads,
        pda_weights(snapshot),
        snapshot.stage_prev,
        snapshot.stage_cojob.astype(float),
        trace=trace,
    )
