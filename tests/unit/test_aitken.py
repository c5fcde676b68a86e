"""``aitken.jump``, the allocator's jump every third round, against the reference's
whole-array ``aitken`` and on sequences whose limits are known."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.simulator.aitken import jump
from tests.unit.allocator_reference import aitken

TOL = 1e-12


def _jumped(h0: list[float], h1: list[float], u: list[float], top: float, only: bool = True):
    out = np.asarray(u, float)
    moved = np.zeros(len(u), np.bool_)
    n = len(u)
    only_ = np.full(n, only)
    jump(out, np.asarray(h0, float), np.asarray(h1, float), np.full(n, top), TOL, only_, moved)
    return out, moved


def test_a_geometric_sequence_jumps_to_its_limit() -> None:
    # steps 0.5 then 0.25: ratio 1/2, limit 1; falling: 1, 0.4, 0.16 -> 0
    got, moved = _jumped([0.0, 1.0], [0.5, 0.4], [0.75, 0.16], top=2.0)
    np.testing.assert_allclose(got, [1.0, 0.0], atol=1e-15)
    assert moved.tolist() == [True, True]


def test_lines_turns_tiny_steps_and_other_queues_stay() -> None:
    got, moved = _jumped(
        [0.0, 0.0, 0.0, 0.0, 0.0],
        [1 / 3, 0.5, 0.5, 1e-13, 0.5],
        [2 / 3, 0.25, 0.975, 1.5e-13, 0.9],
        top=4.0,
    )  # a line; a turn; ratio 0.95 > RATIO; a step below the tolerance; ratio 0.8
    assert moved.tolist() == [False, False, False, False, True]
    np.testing.assert_allclose(got[4], 2.5)  # 0.9 + 0.4 * 0.8 / 0.2
    _, moved = _jumped([0.0], [0.5], [0.75], top=2.0, only=False)
    assert not moved.any()


def test_a_jump_stays_within_what_the_link_carries() -> None:
    got, _ = _jumped([0.0], [0.5], [0.75], top=0.8)
    assert got[0] == 0.8


_values = st.lists(st.floats(0.0, 4.0, allow_nan=False), min_size=3, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_values, st.booleans()), min_size=1, max_size=20), st.floats(0.5, 4))
def test_jump_is_the_references_delta_squared(
    queues: list[tuple[list[float], bool]], top: float
) -> None:
    h0, h1, u = (np.array([q[0][i] for q in queues]) for i in range(3))
    only = np.array([q[1] for q in queues])
    caps = np.full(len(u), top)
    got, moved = u.copy(), np.zeros(len(u), np.bool_)
    jump(got, h0, h1, caps, TOL, only, moved)
    want = np.where(only, aitken(h0, h1, u, caps, TOL), u)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert (moved == (got != u)).all()
