"""The rule's fixed point by progressive filling (``simulator/fabric_fill.py``) against
its definition, the enumeration of ``simulator/fabric_rule.py``: the same rates on the
pooled-queue bench's cases and on random instances of a big switch and of a leaf-spine
path's four tiers (up to 8 flows, three queues per link)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grouper.simulator.allocator import allocate_settled
from grouper.simulator.fabric_fill import fill_rates
from grouper.simulator.fabric_rule import NotUnique, fabric_rates
from tests.unit.test_allocator import crossing

# a big switch: three NICs (depth 1), three receivers' ports (depth 2)
BIG_SWITCH = (np.array([1, 1, 1, 2, 2, 2]), ((0, 3), (3, 6)))
# a leaf-spine path's tiers: NICs 1, leaf uplinks 2, spine downlinks 3, ports 4
FOUR_TIERS = (np.array([1, 1, 1, 2, 2, 3, 3, 4, 4, 4]), ((0, 3), (3, 5), (5, 7), (7, 10)))


def both(paths: list, capacity: np.ndarray, depth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    (pf, pl), pq = crossing(paths)
    return fill_rates(pf, pl, pq, capacity, depth), fabric_rates(pf, pl, pq, capacity, depth)


# the pooled-queue bench's cases on a big switch (links 0-2 NICs, 3-5 ports) and the
# rule's rates
POOLED_CASES = pytest.mark.parametrize(
    "paths, want",
    [
        ([[(0, 0), (3, 0)], [(0, 1), (3, 0)]], [1, 0]),  # ab: the NIC decides
        ([[(0, 0), (3, 0)], [(0, 1), (3, 0)], [(1, 0), (3, 0)]], [1 / 3] * 3),  # abc
        ([[(0, 0), (3, 0)], [(0, 1), (4, 0)], [(1, 0), (4, 0)], [(1, 1), (3, 0)]], [1, 0, 1, 0]),
        ([[(0, 0), (3, 0)], [(0, 1), (3, 0)], [(0, 2), (4, 0)], [(1, 0), (4, 0)]], [1, 0, 0, 1]),
        ([[(0, 0), (3, 0)], [(0, 0), (3, 0)], [(0, 1), (3, 0)]], [0.5, 0.5, 0]),  # tied
    ],
    ids=["ab", "abc", "cross", "three", "tied"],
)


@POOLED_CASES
def test_the_pooled_queue_cases(paths, want):
    got, defined = both(paths, np.ones(6), BIG_SWITCH[0])
    assert got == pytest.approx(want, abs=1e-9)
    assert defined == pytest.approx(want, abs=1e-9)


@st.composite
def instance(draw: st.DrawFn, fabric: tuple) -> tuple[list, np.ndarray, np.ndarray]:
    """Up to 8 flows, each through one link of every tier (a leaf-spine flow may stay
    under its leaf: NIC and port only), a queue of three on each, capacities 1-3."""
    depth, tiers = fabric
    paths = []
    for _ in range(draw(st.integers(1, 8))):
        links = [draw(st.integers(lo, hi - 1)) for lo, hi in tiers]
        if len(tiers) > 2 and draw(st.booleans()):
            links = [links[0], links[-1]]
        paths.append([(lk, draw(st.integers(0, 2))) for lk in links])
    capacity = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]),
                                      min_size=len(depth), max_size=len(depth))))  # fmt: skip
    return paths, capacity, depth


def equals_the_enumeration(
    paths: list, capacity: np.ndarray, depth: np.ndarray, compute=None
) -> None:
    """``compute(paths, capacity, depth)`` (the filling by default) gives the rates of
    the enumeration wherever it has one answer."""
    (pf, pl), pq = crossing(paths)
    try:
        want = fabric_rates(pf, pl, pq, capacity, depth)
    except (NotUnique, ValueError):  # no single answer, or too large to enumerate
        assume(False)
        raise
    if compute is None:
        got = fill_rates(pf, pl, pq, capacity, depth)
    else:
        got = compute(paths, capacity, depth)
    assert got == pytest.approx(want, abs=1e-9)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(instance(BIG_SWITCH))
def test_the_filling_gives_the_rules_rates_on_a_big_switch(case):
    equals_the_enumeration(*case)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(instance(FOUR_TIERS))
def test_the_filling_gives_the_rules_rates_on_four_tiers(case):
    equals_the_enumeration(*case)


def leaf_spine_flows(seed: int, flows: int) -> tuple:
    """``flows`` random flows on 20 hosts under 6 uplinks and 6 downlinks of a leaf-spine
    (half of them through the spine, half NIC to port), 2-7 queues, capacities 1-3."""
    rng = np.random.default_rng(seed)
    sizes = [20, 6, 6, 20]
    base = np.cumsum([0, *sizes])
    depth = np.concatenate([np.full(size, tier + 1.0) for tier, size in enumerate(sizes)])
    queues = int(rng.integers(2, 8))
    paths = []
    for _ in range(flows):
        links = [int(base[t] + rng.integers(size)) for t, size in enumerate(sizes)]
        if rng.random() < 0.5:
            links = [links[0], links[3]]
        paths.append([(lk, int(rng.integers(queues))) for lk in links])
    return paths, rng.choice([1.0, 2.0, 3.0], int(base[-1])), depth


@pytest.mark.parametrize("seed", range(8))
def test_on_60_flows_the_filling_ends_at_a_fixed_point_of_the_model(seed):
    """Instances the enumeration cannot reach, where the upstream owners alone give wrong
    slopes on some pieces (the bottleneck program decides there, 4 to 19 times): the
    answer is a fixed point of the per-link model, checked by the engines' own rounds,
    which started from it settle at once on it."""
    paths, capacity, depth = leaf_spine_flows(seed, 60)
    (pf, pl), pq = crossing(paths)
    got = fill_rates(pf, pl, pq, capacity, depth)
    again = allocate_settled((pf, pl), capacity, np.array(pq), per_crossing=True, start=got)
    assert again.settled
    assert again.rates == pytest.approx(got, abs=1e-9)
