"""The offer sweep (``simulator/offer_sweep.py``) against the rule's definition, the
enumeration of ``simulator/fabric_rule.py``: the pooled-queue bench's cases, random big
switches (where it gives the rule's rates on every instance), random leaf-spine paths'
four tiers and leaf-spines of 160 flows (where what it settles at is a fixed point of
the model, checked by the engines' own rounds; on four tiers it is not always the
rule's: 593 of 598 random instances measured)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from grouper.simulator.allocator import allocate_settled
from grouper.simulator.offer_sweep import offer_sweep, rates_of
from tests.unit.test_allocator import crossing, virtual_links
from tests.unit.test_fabric_fill import (
    BIG_SWITCH,
    FOUR_TIERS,
    POOLED_CASES,
    equals_the_enumeration,
    instance,
    leaf_spine_flows,
)


def swept(paths: list, capacity: np.ndarray, depth: np.ndarray, weight=None) -> np.ndarray:
    """The rates where the sweeps from offers of ``inf`` settle, on flows ``paths``
    ((link, queue) hops); AssertionError where they do not within 5,000 sweeps."""
    pf, cv, vlink, lfirst = virtual_links(paths)
    nv = len(vlink)
    wt = np.ones(len(paths)) if weight is None else np.asarray(weight, float)
    offer = np.full(len(pf), np.inf)
    sweeps = offer_sweep(pf, cv, wt, lfirst, capacity[vlink], np.ones(nv),
                         depth[vlink].astype(float), np.zeros(nv), offer, 5000, 1e-13)  # fmt: skip
    assert sweeps > 0, "the sweeps did not settle"
    out = np.empty(len(paths))
    rates_of(pf, wt, offer, out)
    return out


@POOLED_CASES
def test_the_pooled_queue_cases(paths, want):
    assert swept(paths, np.ones(6), BIG_SWITCH[0]) == pytest.approx(want, abs=1e-12)


def test_a_class_of_flows_weighs_as_its_flows():
    """Two flows of one class (weight 2) beside a third in their queue: a third each,
    as three flows of weight 1."""
    paths = [[(0, 0), (3, 0)], [(1, 0), (3, 0)]]
    assert swept(paths, np.ones(6), BIG_SWITCH[0], weight=[2, 1]) == pytest.approx([1 / 3] * 2)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(instance(BIG_SWITCH))
def test_on_a_big_switch_it_gives_the_rules_rates(case):
    equals_the_enumeration(*case, compute=swept)


def engines(paths: list, capacity: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """The engines' allocation (``allocate_settled``: cycles swept by offers)."""
    (pf, pl), pq = crossing(paths)
    return allocate_settled((pf, pl), capacity, np.array(pq), per_crossing=True).rates


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(instance(BIG_SWITCH))
def test_on_a_big_switch_the_engines_give_the_rules_rates(case):
    equals_the_enumeration(*case, compute=engines)


def settles_at_once(paths: list, capacity: np.ndarray, got: np.ndarray) -> None:
    """The engines' rounds filling every cycle part by part (which keep any fixed point
    they start from), started from ``got``, settle at once on it: a fixed point."""
    (pf, pl), pq = crossing(paths)
    kw = {"per_crossing": True, "start": got, "max_cycle": 0}
    again = allocate_settled((pf, pl), capacity, np.array(pq), **kw)
    assert again.settled
    assert again.rates == pytest.approx(got, abs=1e-9)


@settings(max_examples=150, deadline=None)
@given(instance(FOUR_TIERS))
def test_on_four_tiers_it_settles_at_a_fixed_point(case):
    settles_at_once(case[0], case[1], swept(*case))


@pytest.mark.parametrize("seed", [3, 5, 7, 0, 1, 2])
def test_on_160_flows_it_settles_at_a_fixed_point(seed):
    """Leaf-spines the enumeration cannot reach, and where the filling of
    ``fabric_fill`` takes from seconds to minutes. On seeds 3, 5 and 7 the plain
    sweeps' offers cycle (periods of 2 to 4 sweeps) and the damped ones settle."""
    paths, capacity, depth = leaf_spine_flows(seed, 160)
    settles_at_once(paths, capacity, swept(paths, capacity, depth))


def test_a_queue_outside_the_sweep_keeps_its_use():
    """Virtual links 0 and 1 are queues 0 and 1 of a NIC, 2 a port's: the flow swept
    (NIC queue 1, then the port) gets what queue 0's use (0.4, not swept) leaves."""
    cf, cv = np.array([0, 0]), np.array([1, 2])
    lfirst, cap, dep = np.array([0, 0, 2]), np.ones(3), np.array([1.0, 1.0, 2.0])
    offer, out = np.full(2, np.inf), np.empty(1)
    assert offer_sweep(cf, cv, np.ones(1), lfirst, cap, np.ones(3), dep,
                       np.array([0.4, 0.0, 0.0]), offer, 100, 1e-13) > 0  # fmt: skip
    rates_of(cf, np.ones(1), offer, out)
    assert out == pytest.approx([0.6])
