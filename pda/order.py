"""Primal-dual ordering of stages (grouper paper, Section III-C, Algorithm 1).

The algorithm fills positions from the last (``l``) to the first. At each step it takes
the most loaded port ``lambda`` (remaining load of unplaced stages), places last the
candidate stage with the minimum ratio ``w / L_lambda`` (adjusted weight over load on
that port), sets ``rho = beta_{lambda, M}`` to that ratio, and lowers every unplaced
stage's weight by ``rho * L_lambda``.

Rules this implementation makes explicit (see docs/scheduling.md):

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
  (ingress ports of hosts in list order, then egress ports). Among candidates whose
  ratios are equal (relative tolerance 1e-12) the one with the larger tie key (by
  default: the later cojob in input order, i.e. later arrival) is placed later.
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

from pda.snapshot import Snapshot

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
    csc = csr.tocsc()
    c_ptr, c_idx, c_val = csc.indptr, csc.indices, csc.data
    r_ptr, r_idx, r_val = csr.indptr, csr.indices, csr.data

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
    eps = scale * 1e-12

    has_next = np.zeros(n, dtype=bool)
    has_next[prev[prev >= 0]] = True
    candidate = ~has_next
    alive = np.ones(n, dtype=bool)
    # zero-load candidates are placed as soon as they become candidates
    zero = [int(s) for s in np.flatnonzero(candidate & (total <= 0))]
    zero.sort(key=lambda s: tie_key[s])

    order = np.empty(n, dtype=np.int64)
    rho_at = np.zeros(n)
    port_at = np.full(n, -1, dtype=np.int64)
    min_w = np.inf
    min_w_all = np.inf

    cp, rp = c_ptr.tolist(), r_ptr.tolist()  # Python ints index faster in the loop
    for i in range(n - 1, -1, -1):
        if zero:
            s = zero.pop()  # largest tie key goes last
            rho = 0.0
            p = -1
        else:
            p = int(port_load.argmax())
            rows = c_idx[cp[p] : cp[p + 1]]
            vals = c_val[cp[p] : cp[p + 1]]
            mask = candidate[rows]
            if not mask.any():
                p = _fallback_port(candidate, port_load, r_ptr, r_idx, r_val)
                rows = c_idx[cp[p] : cp[p + 1]]
                vals = c_val[cp[p] : cp[p + 1]]
                mask = candidate[rows]
            cand = rows[mask]
            cv = vals[mask]
            ratio = w[cand] / cv
            j = int(ratio.argmin())
            rho = float(ratio[j])
            ties = (w[cand] - rho * cv <= w_tol).nonzero()[0]  # what line 19 leaves ~0
            if len(ties) > 1:
                j = int(ties[tie_key[cand[ties]].argmax()])
            s = int(cand[j])
            # lower the weights of all stages loading the bottleneck port (line 19); placed
            # stages' weights change too but are never read again; residues of exact
            # ties are set to 0 so that they tie again at the next step
            w[rows] -= rho * vals
            w[rows[np.abs(w[rows]) <= w_tol]] = 0.0
            w[s] = 0.0
        order[i] = s
        rho_at[i] = rho
        port_at[i] = p
        alive[s] = False
        candidate[s] = False
        lo, hi = rp[s], rp[s + 1]
        if hi > lo:
            idx = r_idx[lo:hi]
            left = port_load[idx] - r_val[lo:hi]
            left[left < eps] = 0.0
            port_load[idx] = left
        q = int(prev[s])
        if q >= 0:
            candidate[q] = True
            if total[q] <= 0:
                zero.append(q)
                zero.sort(key=lambda x: tie_key[x])
        if trace and i > 0:
            cw = w[candidate]
            if len(cw):
                min_w = min(min_w, float(cw.min()))
            aw = w[alive]
            if len(aw):
                min_w_all = min(min_w_all, float(aw.min()))

    return OrderResult(order, rho_at, port_at, min_w, min_w_all)


def _fallback_port(
    candidate: np.ndarray,
    port_load: np.ndarray,
    r_ptr: np.ndarray,
    r_idx: np.ndarray,
    r_val: np.ndarray,
) -> int:
    """The most loaded port that at least one candidate loads (lowest index on ties)."""
    cands = np.flatnonzero(candidate)
    starts, ends = r_ptr[cands], r_ptr[cands + 1]
    lens = ends - starts
    if lens.sum() == 0:
        raise AssertionError("no candidate loads any port; zero-load stages are placed first")
    idx = np.concatenate([r_idx[a:b][r_val[a:b] > 0] for a, b in zip(starts, ends, strict=True)])
    ports = np.unique(idx)
    return int(ports[np.argmax(port_load[ports])])


def pda_order(snapshot: Snapshot, *, trace: bool = False) -> OrderResult:
    """PDA over the unfinished stages of a snapshot."""
    return primal_dual_order(
        snapshot.stage_loads,
        stage_weights(snapshot.stage_number),
        snapshot.stage_prev,
        snapshot.stage_cojob.astype(float),
        trace=trace,
    )
