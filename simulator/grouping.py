"""Stable grouping of entries by small integer keys (numba), shared by the allocator
(``allocator_kernel``), the queue order (``queue_order``) and the fast path's rebuild
(``fast_state``)."""

from __future__ import annotations

import numpy as np

from grouper.simulator.kernel import kernel


@kernel
def csr(idx: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Entries grouped by ``idx`` (stable: a counting sort over ``size`` groups) and
    the start of every group."""
    start = np.zeros(size + 1, dtype=np.int64)
    for i in range(len(idx)):
        start[idx[i] + 1] += 1
    for k in range(size):
        start[k + 1] += start[k]
    order = np.empty(len(idx), dtype=np.int64)
    at = start[:-1].copy()
    for i in range(len(idx)):
        order[at[idx[i]]] = i
        at[idx[i]] += 1
    return order, start


@kernel
def runs(key: np.ndarray, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For entries ``order`` sorted by ``key``: the dense id of every entry's key and
    the start of every id's run in that order plus the end."""
    ids = np.empty(len(key), dtype=np.int64)
    starts = np.empty(len(key) + 1, dtype=np.int64)
    nid = 0
    for k in range(len(order)):
        i = order[k]
        if k == 0 or key[i] != key[order[k - 1]]:
            starts[nid] = k
            nid += 1
        ids[i] = nid - 1
    starts[nid] = len(order)
    return ids, starts[: nid + 1]
