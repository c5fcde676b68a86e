"""The rounds' exact end (``simulator/newton_end.py``) against the rule's definition,
the enumeration of ``simulator/fabric_rule.py``, on random big switches and leaf-spine
paths' four tiers: every answer it accepts is the rule's, from wherever it starts (the
rounds' rates after 1-3 rounds, random rates, the rule's own); on a big switch it
accepts the rule's own rates (on four tiers the most upstream full prefix is not
always the rule's bottleneck: it refuses about 3% of them); and where the model has a
continuum of fixed points it refuses the rounds' middle point."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from grouper.simulator.allocator_kernel import allocate_kernel
from grouper.simulator.fabric_rule import NotUnique, fabric_rates
from grouper.simulator.newton_end import newton_end
from tests.unit.test_allocator import crossing, virtual_links
from tests.unit.test_fabric_fill import BIG_SWITCH, FOUR_TIERS, instance


def newton(paths: list, capacity: np.ndarray, depth: np.ndarray, rates) -> np.ndarray | None:
    """``newton_end`` from ``rates`` on the flows ``paths`` ((link, queue) hops); None
    where it refuses."""
    pf, cv, vlink, lfirst = virtual_links(paths)
    out = np.zeros(len(paths))
    ok = newton_end(pf, cv, np.ones(len(paths)), np.asarray(rates, float), lfirst,
                    capacity[vlink], np.ones(len(vlink)), depth[vlink].astype(float),
                    out)  # fmt: skip
    return out if ok else None


def rounds(paths: list, capacity: np.ndarray, k: int) -> np.ndarray:
    """The rates of the allocator's ``k``-th round from 0 (its last filling), every
    cycle filled part by part (the rounds that reach a piece without settling)."""
    (pf, pl), pq = crossing(paths)
    n = len(paths)
    a = (np.asarray(x, dtype=np.int64) for x in (pf, pl, pq))
    _, _, last = allocate_kernel(*a, np.zeros(len(pf), np.int64), capacity, 0.0, n,
                                 np.zeros(n), False, np.zeros(n, bool), 1e-12, k, k, 0)  # fmt: skip
    return last


def rule(paths: list, capacity: np.ndarray, depth: np.ndarray) -> np.ndarray:
    (pf, pl), pq = crossing(paths)
    try:
        return fabric_rates(pf, pl, pq, capacity, depth)
    except (NotUnique, ValueError):  # no single answer, or too large to enumerate
        assume(False)
        raise


def test_the_pooled_queue_case_ab_ends_where_the_nic_decides():
    paths = [[(0, 0), (3, 0)], [(0, 1), (3, 0)]]  # a above b on the NIC, pooled at the port
    capacity, depth = np.ones(6), BIG_SWITCH[0]
    assert newton(paths, capacity, depth, [0.5, 0.5]) is None  # the rounds' middle point
    assert newton(paths, capacity, depth, [1.0, 0.0]) == pytest.approx([1.0, 0.0], abs=1e-12)
    assert newton(paths, capacity, depth, [0.9, 0.1]) is None  # not on the rule's piece


def accepts_only_the_rule(case: tuple, data: st.DataObject, finds_it: bool) -> None:
    paths, capacity, depth = case
    want = rule(paths, capacity, depth)
    starts = [rounds(paths, capacity, k) for k in (1, 2, 3)]
    some = st.sampled_from([0.0, 0.5, 1.0, 1.5])
    starts.append(np.array(data.draw(st.lists(some, min_size=len(paths), max_size=len(paths)))))
    for start in starts:
        got = newton(paths, capacity, depth, start)
        assert got is None or got == pytest.approx(want, abs=1e-9), start
    got = newton(paths, capacity, depth, want * (1 + 1e-9))
    assert (got is None and not finds_it) or got == pytest.approx(want, abs=1e-9)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(instance(BIG_SWITCH), st.data())
def test_every_answer_it_accepts_is_the_rules_on_a_big_switch(case, data):
    accepts_only_the_rule(case, data, finds_it=True)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(instance(FOUR_TIERS), st.data())
def test_every_answer_it_accepts_is_the_rules_on_four_tiers(case, data):
    accepts_only_the_rule(case, data, finds_it=False)
