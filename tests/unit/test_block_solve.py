"""``simulator/block_solve.py`` against numpy's dense solve: random sparse systems
(blocks of any size, entries read across them in any direction, repeated entries),
the blocks' order (every block after those it reads) and singular systems refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse as sp

from grouper.simulator.block_solve import blocks, solve


def to_csr(r: np.ndarray, c: np.ndarray, x: np.ndarray, n: int) -> tuple:
    """The entries as rows (start, column, value), those at one place summed."""
    m = sp.csr_matrix((x, (r, c)), shape=(n, n))
    m.sum_duplicates()
    return m.indptr.astype(np.int64), m.indices.astype(np.int64), m.data.astype(float)


@st.composite
def sparse(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Entries of an n x n matrix whose diagonal outweighs the rest of its row (so it is
    regular), some of them repeated."""
    n = draw(st.integers(1, 12))
    cells = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                                    st.floats(-1, 1)), max_size=3 * n))  # fmt: skip
    cells += [(i, i, 4.0 * n) for i in range(n)] + [(i, i, 1.0) for i in range(0, n, 2)]
    r, c, x = (np.array(v) for v in zip(*cells, strict=True))
    return r.astype(np.int64), c.astype(np.int64), x.astype(float), n


@settings(max_examples=300, deadline=None)
@given(sparse(), st.integers(0, 2**32 - 1))
def test_it_solves_as_numpy_does(system, seed):
    r, c, x, n = system
    dense = np.zeros((n, n))
    np.add.at(dense, (r, c), x)
    b = np.random.default_rng(seed).normal(size=(n, 2))
    ok, got = solve(*to_csr(r, c, x, n), b)
    assert ok
    assert got == pytest.approx(np.linalg.solve(dense, b), rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(sparse())
def test_every_block_comes_after_the_blocks_it_reads(system):
    r, c, x, n = system
    start, col, _ = to_csr(r, c, x, n)
    order, bstart = blocks(start, col, n)
    assert sorted(order) == list(range(n))
    block = np.empty(n, np.int64)
    for k in range(len(bstart) - 1):
        block[order[bstart[k] : bstart[k + 1]]] = k
    for i in range(n):
        for j in col[start[i] : start[i + 1]]:
            assert block[j] <= block[i]  # read before, or in the same block
    # a block is strongly connected: it cannot be split into two that read one way
    reach = np.eye(n, dtype=bool)
    for i in range(n):
        reach[i, col[start[i] : start[i + 1]]] = True
    for _ in range(n):
        reach = reach | (reach.astype(int) @ reach.astype(int) > 0)
    assert ((block[:, None] == block[None, :]) == (reach & reach.T)).all()


def test_a_singular_block_is_refused():
    # unknowns 0, 1 read each other (one block), and their rows are equal
    r, c, x = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 0, 1, 2]), np.array([1, 1, 1, 1, 3.0])
    ok, _ = solve(*to_csr(r, c, x, 3), np.ones((3, 2)))
    assert not ok
