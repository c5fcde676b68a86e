"""The compiled PDA loop gives exactly the plain-numpy loop's order, rho and ports,
ties and chains included (instances built so that exact ties are common)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from grouper.pda.order import primal_dual_order, stage_weights
from tests.unit.pda_reference import reference_order


@st.composite
def instances(draw: st.DrawFn) -> tuple:
    n = draw(st.integers(1, 30))
    ports = draw(st.integers(1, 6))
    # small integer loads and few distinct values: equal ratios (ties) are frequent
    cells = draw(st.lists(st.sampled_from([0, 0, 0, 1, 2, 4]), min_size=n * ports,
                          max_size=n * ports))  # fmt: skip
    loads = np.array(cells, dtype=float).reshape(n, ports)
    # cojobs: consecutive rows, chained in row order; tie key = cojob index
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=n))
    prev = np.full(n, -1, dtype=np.int64)
    number = np.ones(n)
    key = np.zeros(n)
    row, c = 0, 0
    for size in sizes:
        for k in range(size):
            if row >= n:
                break
            if k > 0:
                prev[row] = row - 1
            number[row], key[row] = k + 1, c
            row += 1
        c += 1
    key[row:] = np.arange(c, c + n - row)
    return loads, number, prev, key


@settings(max_examples=300, deadline=None)
@given(instances())
def test_compiled_loop_matches_the_reference(inst: tuple) -> None:
    loads, number, prev, key = inst
    m = sparse.csr_matrix(loads)
    got = primal_dual_order(m, stage_weights(number), prev, key, trace=True)
    want = reference_order(m, stage_weights(number), prev, key, trace=True)
    assert got.order.tolist() == want.order.tolist()
    assert got.port.tolist() == want.port.tolist()
    np.testing.assert_allclose(got.rho, want.rho, rtol=1e-12, atol=1e-15)
    assert np.isclose(got.min_adjusted_weight, want.min_adjusted_weight, atol=1e-12)
    assert np.isclose(got.min_adjusted_weight_all, want.min_adjusted_weight_all, atol=1e-12)


def test_compiled_loop_matches_the_reference_at_scale() -> None:
    """A random 600-stage, 80-port instance with chains: same order position for position."""
    from grouper.pda.snapshot import build_snapshot
    from grouper.workloads.random_instance import random_cojobs

    names, cojobs = random_cojobs(40, 600, seed=3)
    snap = build_snapshot(cojobs, names)
    args = (snap.stage_loads, stage_weights(snap.stage_number), snap.stage_prev,
            snap.stage_cojob.astype(float))  # fmt: skip
    assert primal_dual_order(*args).order.tolist() == reference_order(*args).order.tolist()
