"""The plain-numpy PDA loop the compiled kernel (``pda/order_kernel.py``) replaced,
kept as the reference it is checked against (``test_order_kernel.py``)."""

from __future__ import annotations

import numpy as np
from scipy import sparse

from grouper.pda.order import WEIGHT_TOL, OrderResult


def reference_order(
    loads: sparse.spmatrix,
    weights: np.ndarray,
    prev: np.ndarray | None = None,
    tie_key: np.ndarray | None = None,
    *,
    trace: bool = False,
) -> OrderResult:  # noqa: C901
    """Order the rows of ``loads`` (units x ports) by the reverse primal-dual rule.

    ``prev[s]`` is the row that must come before ``s`` (its chain predecessor) or -1.
    With ``trace`` the minimum adjusted weights are tracked (costs O(n) per step).
    """
    csr = sparse.csr_matrix(loads, dtype=float)
    csr.sum_duplicates()
    n, nports = csr.shape
    csr.eliminate_zeros()
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
