"""The compiled loop of PDA (numba): one backward step per position.

Each step reads one port's column and one stage's row, so a step costs the nonzeros it
touches; the bottleneck port comes from a segment tree over the ports that some
candidate loads (lowest index on ties), kept in O(log ports) per changed port.
The tree holds port indices only and ``rank`` holds the values (together about 400 KB
at 20,000 ports, in cache). At 100,000 stages a tree of (index, value) pairs took
1.18-1.38 s, this one 0.48-0.65 s (alternated runs in one process, the same order).
Semantics are those documented in :mod:`pda.order`; ``tests/unit/pda_reference.py``
keeps the plain-numpy loop the kernel is checked against.

numba's disk cache (``cache=True``) records this module by its import name,
``grouper.pda.order_kernel``.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _tree_build(rank: np.ndarray) -> tuple[np.ndarray, int]:
    """A max segment tree of port indices: ``idx[k]`` is the port winning under node
    ``k`` by ``rank`` (the lower index on ties, ``np.argmax``'s rule), -1 below the
    padding. Only indices are kept (int32): the tree and ``rank`` stay in cache."""
    size = 1
    while size < len(rank):
        size *= 2
    idx = np.full(2 * size, -1, dtype=np.int32)
    for p in range(len(rank)):
        idx[size + p] = p
    for k in range(size - 1, 0, -1):
        idx[k] = _winner(idx, rank, k)
    return idx, size


@njit(cache=True, inline="always")
def _winner(idx: np.ndarray, rank: np.ndarray, k: int) -> int:
    a, b = idx[2 * k], idx[2 * k + 1]
    if b < 0:
        return a
    if a < 0:
        return b
    ra, rb = rank[a], rank[b]  # read once: the inline expression compiled to half the speed
    return b if rb > ra or (rb == ra and b < a) else a


@njit(cache=True)
def _tree_set(idx: np.ndarray, rank: np.ndarray, size: int, p: int, value: float) -> None:
    """Set port ``p``'s rank; a node whose winner stays another port leaves its
    ancestors as they are."""
    rank[p] = value
    k = (size + p) // 2
    while k >= 1:
        w = _winner(idx, rank, k)
        if w == idx[k] and w != p:
            return
        idx[k] = w
        k //= 2


@njit(cache=True)
def _pop_zero(zero: list, tie_key: np.ndarray) -> int:  # noqa: ANN001 - numba typed list
    """The zero-load candidate with the largest tie key, the latest added among equals."""
    j = 0
    for k in range(1, len(zero)):
        if tie_key[zero[k]] >= tie_key[zero[j]]:
            j = k
    return zero.pop(j)


@njit(cache=True)
def order_loop(
    c_ptr: np.ndarray,
    c_idx: np.ndarray,
    c_val: np.ndarray,
    r_ptr: np.ndarray,
    r_idx: np.ndarray,
    r_val: np.ndarray,
    w: np.ndarray,
    prev: np.ndarray,
    tie_key: np.ndarray,
    port_load: np.ndarray,
    total: np.ndarray,
    w_tol: float,
    eps: float,
    trace: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float, float]:
    n = len(w)
    candidate = np.ones(n, dtype=np.bool_)
    for s in range(n):
        if prev[s] >= 0:
            candidate[prev[s]] = False
    alive = np.ones(n, dtype=np.bool_)
    zero = [np.int64(x) for x in range(0)]
    for s in range(n):
        if candidate[s] and total[s] <= 0:
            zero.append(s)
    # the tree ranks ports some candidate loads (the rest at -inf): its top is the most
    # loaded port when a candidate loads it, else the fallback port of the docstring
    loaded_by = np.zeros(len(port_load), dtype=np.int64)
    for s in range(n):
        if candidate[s]:
            for k in range(r_ptr[s], r_ptr[s + 1]):
                loaded_by[r_idx[k]] += 1
    rank = np.where(loaded_by > 0, port_load, -np.inf)
    t_idx, size = _tree_build(rank)
    c_end = c_ptr[1:].copy()  # each column's entries of unplaced stages end here
    order = np.empty(n, dtype=np.int64)
    rho_at = np.zeros(n)
    port_at = np.full(n, -1, dtype=np.int64)
    min_w, min_w_all = np.inf, np.inf
    for i in range(n - 1, -1, -1):
        if len(zero) > 0:
            s = _pop_zero(zero, tie_key)
            rho, p = 0.0, -1
        else:
            p = t_idx[1]
            if p < 0:
                raise AssertionError("no candidate loads any port")
            s, rho = _step(candidate, alive, c_ptr, c_end, c_idx, c_val, w, tie_key, w_tol, p)
        order[i], rho_at[i], port_at[i] = s, rho, p
        alive[s] = False
        candidate[s] = False
        for k in range(r_ptr[s], r_ptr[s + 1]):
            q = r_idx[k]
            left = port_load[q] - r_val[k]
            port_load[q] = left if left >= eps else 0.0
            loaded_by[q] -= 1
            v = port_load[q] if loaded_by[q] > 0 else -np.inf
            if rank[q] != v:  # a walk to the root for an unchanged rank is wasted
                _tree_set(t_idx, rank, size, q, v)
        q = prev[s]
        if q >= 0:
            candidate[q] = True
            if total[q] <= 0:
                zero.append(q)
            for k in range(r_ptr[q], r_ptr[q + 1]):
                x = r_idx[k]
                loaded_by[x] += 1
                if rank[x] != port_load[x]:  # only a port no candidate loaded rises
                    _tree_set(t_idx, rank, size, x, port_load[x])
        if trace and i > 0:
            for r in range(n):
                if candidate[r]:
                    min_w = min(min_w, w[r])
                if alive[r]:
                    min_w_all = min(min_w_all, w[r])
    return order, rho_at, port_at, min_w, min_w_all


@njit(cache=True)
def _step(
    candidate: np.ndarray,
    alive: np.ndarray,
    c_ptr: np.ndarray,
    c_end: np.ndarray,
    c_idx: np.ndarray,
    c_val: np.ndarray,
    w: np.ndarray,
    tie_key: np.ndarray,
    w_tol: float,
    p: int,
) -> tuple[int, float]:
    """Place on port ``p`` the candidate with the least ``w / load`` (the first one);
    among those that line 19 leaves within ``w_tol`` of 0, the largest tie key (the first
    on equal keys). Lowers the weights of all unplaced stages loading ``p`` on the way
    (residues within ``w_tol`` set to 0, so that they tie again), and drops the placed
    ones from the column, keeping its order (``c_idx``/``c_val`` are the caller's copies):
    a column is read once per step it is the bottleneck, so it costs what is left."""
    best, rho = -1, np.inf
    lo, hi = c_ptr[p], c_end[p]
    for k in range(lo, hi):
        r = c_idx[k]
        if candidate[r]:
            ratio = w[r] / c_val[k]
            if best < 0 or ratio < rho:
                best, rho = r, ratio
    chosen, ties, out = best, 0, lo
    for k in range(lo, hi):
        r = c_idx[k]
        if not alive[r]:
            continue
        v = c_val[k]
        c_idx[out], c_val[out] = r, v
        out += 1
        left = w[r] - rho * v
        if candidate[r] and left <= w_tol:
            if ties == 0 or tie_key[r] > tie_key[chosen]:
                chosen = r
            ties += 1
        w[r] = 0.0 if abs(left) <= w_tol else left
    c_end[p] = out
    s = chosen if ties > 1 else best
    w[s] = 0.0
    return s, rho


@njit(cache=True)
def completion_cost(
    r_ptr: np.ndarray, r_idx: np.ndarray, r_val: np.ndarray, order: np.ndarray,
    w: np.ndarray, nports: int,
) -> float:  # fmt: skip
    """``sum w[s] * C[s]`` over the rows in ``order``, ``C[s]`` the most that any port
    ``s`` loads carries up to and including ``s`` (the rows before it in ``order``
    first): the objective PDA approximates, in one pass over the nonzeros."""
    cum = np.zeros(nports)
    cost = 0.0
    for s in order:
        c = 0.0
        for k in range(r_ptr[s], r_ptr[s + 1]):
            p = r_idx[k]
            cum[p] += r_val[k]
            if cum[p] > c:
                c = cum[p]
        cost += w[s] * c
    return cost
