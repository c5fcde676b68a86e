"""``anderson.extrapolate``, the move of a cycle's queues after every round that did not
settle: on affine maps whose fixed points are known, and against the reference's
whole-array ``anderson``."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.simulator.anderson import MEMORY, REACH, REACH_LATE, extrapolate, history
from tests.unit.allocator_reference import anderson

TOL = 1e-12


def _rounds(
    a: np.ndarray, b: np.ndarray, x: np.ndarray, top: float, n: int, only=None,
    reach: float = REACH,
):  # fmt: skip
    """``n`` rounds of ``x -> a x + b``, each followed by ``extrapolate``: every start."""
    nv = len(x)
    xs, gs, mask, held = history(nv)
    only = np.ones(nv, np.bool_) if only is None else only
    starts = [x.copy()]
    for _ in range(n):
        u = a @ x + b
        moved = np.zeros(nv, np.bool_)
        extrapolate(u, x, only, xs, gs, mask, held, np.full(nv, top), TOL, moved, reach)
        x = u
        starts.append(x.copy())
    return starts


def test_an_affine_map_of_few_directions_is_solved_in_that_many_rounds() -> None:
    # the use comes back through two directions (rank 2, each a fraction a round): the
    # plain rounds close in geometrically; the extrapolation from three differences
    # (the map's minimal polynomial has degree 3) is the fixed point
    rng = np.random.default_rng(3)
    u, v = rng.normal(size=(2, 6))
    a = 0.8 * np.outer(u, u) / (u @ u) - 0.5 * np.outer(v, v) / (v @ v)
    fixed = rng.uniform(1.0, 2.0, 6)
    b = fixed - a @ fixed
    starts = _rounds(a, b, np.zeros(6), 100.0, 4)
    np.testing.assert_allclose(starts[4], fixed, rtol=1e-9)
    plain = np.zeros(6)
    for _ in range(4):
        plain = a @ plain + b
    assert np.abs(plain - fixed).max() > 0.1  # the rounds alone are far from it


def test_queues_outside_the_cycles_and_the_links_bounds_are_kept() -> None:
    a, b = np.diag([0.8, 0.8]), np.array([1.0, 1.0])  # fixed point 5 on each
    only = np.array([True, False])
    starts = _rounds(a, b, np.zeros(2), 3.0, 3, only)
    assert starts[3][0] == 3.0  # clipped to what the link carries
    np.testing.assert_allclose(starts[3][1], 1 + 0.8 + 0.64)  # plain rounds


def test_a_move_further_than_reach_is_not_taken() -> None:
    # nearly a line (ratio 0.99): the limit is 100 plain steps away, past REACH
    a, b = np.diag([0.99]), np.array([1.0])
    starts = _rounds(a, b, np.zeros(1), 1e6, 3)
    np.testing.assert_allclose(starts[3], [1 + 0.99 + 0.99**2])


def test_late_rounds_reach_a_fixed_point_hundreds_of_steps_away() -> None:
    # ratio 0.998: the limit (500) is about 500 plain steps away, within REACH_LATE
    a, b = np.diag([0.998]), np.array([1.0])
    far = _rounds(a, b, np.zeros(1), 1e6, 3, reach=REACH_LATE)
    np.testing.assert_allclose(far[3], [500.0], rtol=1e-9)
    assert _rounds(a, b, np.zeros(1), 1e6, 3)[3][0] < 3  # REACH: plain rounds


def test_the_history_starts_again_when_the_cycles_queues_change() -> None:
    nv = 2
    xs, gs, mask, held = history(nv)
    top, moved = np.full(nv, 10.0), np.zeros(nv, np.bool_)
    only = np.array([True, False])
    x0, x1 = np.zeros(nv), np.array([1.0, 0.0])
    extrapolate(x1.copy(), x0, only, xs, gs, mask, held, top, TOL, moved, REACH)
    extrapolate(np.array([1.5, 0.0]), x1, only, xs, gs, mask, held, top, TOL, moved, REACH)
    assert held[0] == 2 and moved.any()
    u = np.array([1.7, 0.3])
    extrapolate(u, np.array([1.5, 0.1]), ~only | only, xs, gs, mask, held, top, TOL, moved, REACH)
    assert held[0] == 1  # only this round: nothing to extrapolate from
    np.testing.assert_array_equal(u, [1.7, 0.3])


_round = st.lists(st.floats(0.0, 4.0, allow_nan=False), min_size=4, max_size=4)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(_round, _round), min_size=1, max_size=MEMORY + 3),
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.floats(0.5, 4),
)
def test_extrapolate_is_the_references_anderson(
    rounds: list[tuple[list[float], list[float]]], only: list[bool], top: float
) -> None:
    only_ = np.array(only)
    xs, gs, mask, held = history(4)
    caps = np.full(4, top)
    for i, (x, g) in enumerate(rounds):
        got, moved = np.array(g), np.zeros(4, np.bool_)
        extrapolate(got, np.array(x), only_, xs, gs, mask, held, caps, TOL, moved, REACH)
        kept = rounds[max(0, i - MEMORY) : i + 1]
        to = anderson(
            [np.array(x)[only_] for x, _ in kept], [np.array(g)[only_] for _, g in kept],
            caps[only_], TOL,
        )  # fmt: skip
        want = np.array(g)
        if to is not None:
            far = np.abs(to - want[only_]) > TOL
            want[np.flatnonzero(only_)[far]] = to[far]
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        assert (moved == (got != np.array(g))).all()
