"""The rule for the per-link model's ties (``simulator/fabric_rule.py``): where a link
and a link downstream of it bind together, the upstream one decides. Its answers on the
pooled-queue bench's cases (what real TCP gave: docs/explanation/simulator-model.md),
and on random big-switch instances it is a fixed point of the per-link model, the one
the rounds find wherever that fixed point is unique."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.simulator.allocator import allocate_settled
from grouper.simulator.fabric_rule import MAX_CHOICES, NotUnique, fabric_rates
from tests.unit.test_allocator import crossing

# a big switch with two senders' NICs (links 0, 1: depth 1) and two receivers' ports
# (links 2, 3: depth 2), every link at rate 1
CAPACITY, DEPTH = np.ones(4), np.array([1, 1, 2, 2])


def rule(paths: list[list[tuple[int, int]]], capacity=CAPACITY, depth=DEPTH) -> np.ndarray:
    """The rule's rates of flows given as paths of (link, queue) crossings."""
    (pf, pl), pq = crossing(paths)
    return fabric_rates(pf, pl, pq, capacity, depth)


def test_the_nics_priority_decides_a_port_queue_only_it_feeds():
    """a above b on NIC 0, both in port 2's one queue: the rounds' 1/2 each is one of a
    continuum of fixed points; TCP gives a the link (19.1 of 20 Mbit/s)."""
    assert rule([[(0, 0), (2, 0)], [(0, 1), (2, 0)]]) == pytest.approx([1, 0])


def test_a_second_nic_into_the_port_makes_the_port_the_bottleneck():
    r = rule([[(0, 0), (2, 0)], [(0, 1), (2, 0)], [(1, 0), (2, 0)]])
    assert r == pytest.approx([1 / 3] * 3)


def test_a_cycle_across_two_hosts_goes_to_each_nics_top_band():
    """h1: a (band 0) to port 2, b (band 1) to port 3; h3: c (0) to 3, d (1) to 2."""
    paths = [[(0, 0), (2, 0)], [(0, 1), (3, 0)], [(1, 0), (3, 0)], [(1, 1), (2, 0)]]
    assert rule(paths) == pytest.approx([1, 0, 1, 0])


def test_three_bands_over_two_ports():
    """h1: a (0) and b (1) to port 2, e (2) to port 3, which c (h3, band 0) shares."""
    paths = [[(0, 0), (2, 0)], [(0, 1), (2, 0)], [(0, 2), (3, 0)], [(1, 0), (3, 0)]]
    assert rule(paths) == pytest.approx([1, 0, 0, 1])


def test_flows_tied_in_a_band_share_it_and_leave_the_band_below_nothing():
    assert rule([[(0, 0), (2, 0)], [(0, 0), (2, 0)], [(0, 1), (2, 0)]]) == pytest.approx(
        [0.5, 0.5, 0]
    )


def test_links_at_one_depth_tied_have_no_single_answer():
    """Two flows over two links of the same depth, each above the other on one: a tie
    the rule does not decide (the fabric's depths never put two links of one path at
    one depth)."""
    with pytest.raises(NotUnique):
        rule([[(0, 0), (1, 1)], [(0, 1), (1, 0)]], np.ones(2), np.ones(2))


def test_an_instance_too_large_to_enumerate_is_refused():
    flows = 1 + int(np.log2(MAX_CHOICES))
    with pytest.raises(ValueError, match="too large"):
        rule([[(0, 0), (2, 0)]] * flows)


@st.composite
def big_switch(draw: st.DrawFn, queues: str) -> tuple[list, np.ndarray]:
    """Up to 5 flows over 3 NICs and 3 ports of random capacities; queues per crossing
    as ``queues`` says: ``one`` (every flow in one queue: fair sharing), ``rank`` (a
    queue per flow, from one global order: no pooling), ``any``."""
    n = draw(st.integers(1, 5))
    order = draw(st.permutations(range(n)))
    paths = []
    for f in range(n):
        nic, port = draw(st.integers(0, 2)), draw(st.integers(3, 5))
        if queues == "one":
            qn = qp = 0
        elif queues == "rank":
            qn = qp = order[f]
        else:
            qn, qp = draw(st.integers(0, 2)), draw(st.integers(0, 2))
        paths.append([(nic, qn), (port, qp)])
    capacity = np.array(draw(st.lists(st.sampled_from([1.0, 2.0, 3.0]), min_size=6, max_size=6)))
    return paths, capacity


def rounds(paths: list, capacity: np.ndarray) -> np.ndarray:
    pairs, pq = crossing(paths)
    got = allocate_settled(pairs, capacity, np.array(pq), per_crossing=True)
    assert got.settled
    return got.rates


def is_fixed_point(paths: list, capacity: np.ndarray, r: np.ndarray) -> bool:
    """Strict priority per link, max-min within a queue: every link's queues within its
    capacity, and every flow has a link where its queue and those above fill the link
    and no flow of its queue there has more."""
    tol = 1e-7
    crossing = [(f, link, q) for f, p in enumerate(paths) for link, q in p]

    def prefix(link: int, q: int) -> float:
        return sum(r[g] for g, lk, qq in crossing if lk == link and qq <= q)

    if any(x < -tol for x in r) or any(prefix(lk, q) > capacity[lk] + tol for _, lk, q in crossing):
        return False
    return all(
        any(
            abs(prefix(lk, q) - capacity[lk]) <= tol
            and all(r[g] <= r[f] + tol for g, l2, q2 in crossing if (l2, q2) == (lk, q))
            for lk, q in paths[f]
        )
        for f in range(len(paths))
    )


DEPTHS = np.array([1, 1, 1, 2, 2, 2])


@settings(max_examples=150, deadline=None)
@given(big_switch("any"))
def test_the_rules_rates_are_a_fixed_point_of_the_per_link_model(instance):
    paths, capacity = instance
    assert is_fixed_point(paths, capacity, rule(paths, capacity, DEPTHS))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(["one", "rank"]).flatmap(big_switch))
def test_where_the_fixed_point_is_unique_the_rule_and_the_rounds_agree(instance):
    """One queue everywhere (max-min) or a queue per rank of one global order: no
    pooled queue closes a cycle, the fixed point is unique."""
    paths, capacity = instance
    assert rule(paths, capacity, DEPTHS) == pytest.approx(rounds(paths, capacity), abs=1e-7)
