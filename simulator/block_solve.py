"""A sparse square linear system solved block by block (numba), for ``newton_end``.

The exact end's system has one unknown per bottleneck, and a bottleneck's equation
reads only the levels of the flows in its prefix: outside the cycles of queues most
of them depend on a few others and nothing depends back. So the system is split into
its strongly connected components (Tarjan's algorithm, iterative), which come out
with every component after the ones it reads; each is then a small dense system once
the levels it reads are known. A system of 1,000 unknowns whose largest block is 300
costs that block's solve, not the whole one's.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.kernel import kernel

MAX_BLOCK = 2048  # unknowns of one block solved at most (a dense solve)


@kernel
def blocks(start: np.ndarray, col: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The strongly connected components of the graph ``i -> col`` of row ``i``
    (Tarjan's, without recursion): the unknowns block by block, every block after the
    blocks it reads, and where each block starts (and the end)."""
    index, low = np.full(n, -1, np.int64), np.zeros(n, np.int64)
    on, stack, sp = np.zeros(n, np.bool_), np.empty(n, np.int64), 0
    node, edge = np.empty(n, np.int64), np.empty(n, np.int64)
    order, bstart = np.empty(n, np.int64), np.zeros(n + 1, np.int64)
    seen = nblk = pos = 0
    for s in range(n):
        if index[s] >= 0:
            continue
        node[0], edge[0], depth = s, start[s], 1
        index[s] = low[s] = seen
        seen += 1
        stack[sp], on[s], sp = s, True, sp + 1
        while depth > 0:
            v, e = node[depth - 1], edge[depth - 1]
            if e < start[v + 1]:
                edge[depth - 1] = e + 1
                w = col[e]
                if index[w] < 0:
                    index[w] = low[w] = seen
                    seen += 1
                    stack[sp], on[w], sp = w, True, sp + 1
                    node[depth], edge[depth], depth = w, start[w], depth + 1
                elif on[w]:
                    low[v] = min(low[v], index[w])
                continue
            depth -= 1
            if depth > 0:
                low[node[depth - 1]] = min(low[node[depth - 1]], low[v])
            if low[v] == index[v]:
                bstart[nblk], nblk = pos, nblk + 1
                while True:
                    sp -= 1
                    w = stack[sp]
                    on[w], order[pos], pos = False, w, pos + 1
                    if w == v:
                        break
    bstart[nblk] = pos
    return order, bstart[: nblk + 1]


@kernel
def solve(
    start: np.ndarray, col: np.ndarray, val: np.ndarray, b: np.ndarray
) -> tuple[bool, np.ndarray]:  # fmt: skip
    """``A x = b`` for ``A`` by rows (row ``i``'s columns and values at
    ``start[i]:start[i + 1]`` of ``col`` and ``val``, one entry per column) and ``b`` of
    any columns, block by block; False where a block is singular or larger than ``MAX_BLOCK``."""
    n = len(start) - 1
    x = np.zeros(b.shape)
    order, bstart = blocks(start, col, n)
    local = np.full(n, -1, np.int64)
    for k in range(len(bstart) - 1):
        members = order[bstart[k] : bstart[k + 1]]
        s = len(members)
        if s > MAX_BLOCK:
            return False, x
        for i in range(s):
            local[members[i]] = i
        a, y = np.zeros((s, s)), np.zeros((s, b.shape[1]))
        for i in range(s):
            m = members[i]
            y[i] = b[m]
            for e in range(start[m], start[m + 1]):
                if local[col[e]] >= 0:
                    a[i, local[col[e]]] += val[e]
                else:  # a block read before this one: known
                    y[i] -= val[e] * x[col[e]]
        try:
            z = np.linalg.solve(a, y)
        except Exception:  # noqa: BLE001 (numba: a singular block)
            return False, x
        for i in range(s):
            x[members[i]] = z[i]
            local[members[i]] = -1
    return True, x
