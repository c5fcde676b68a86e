"""Allocator against hand-computed cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from grouper.simulator.allocator import allocate_settled
from grouper.simulator.offer_sweep import MAX_CYCLE
from tests.unit.allocator_reference import allocate_reference


def allocate(*args, **kwargs) -> np.ndarray:
    """The allocator's rates alone (``allocate_settled(...).rates``)."""
    return allocate_settled(*args, **kwargs).rates


def inc(paths: list[list[int]], links: int) -> sparse.csr_matrix:
    rows = [i for i, p in enumerate(paths) for _ in p]
    cols = [link for p in paths for link in p]
    return sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(paths), links))


def test_max_min_on_a_shared_link():
    r = allocate(inc([[0], [0], [0]], 1), np.array([9.0]), np.zeros(3))
    assert r == pytest.approx([3, 3, 3])


def test_two_hop_paths_with_different_bottlenecks():
    # link 0 cap 10 shared by f0, f1; link 1 cap 2 carries f1 only; f1 is capped at 2,
    # f0 takes the rest of link 0 (max-min, not equal split)
    r = allocate(inc([[0], [0, 1]], 2), np.array([10.0, 2.0]), np.zeros(2))
    assert r == pytest.approx([8, 2])


def test_classic_three_link_max_min():
    # f0: links 0,1; f1: link 0; f2: link 1; caps 1 and 2
    r = allocate(inc([[0, 1], [0], [1]], 2), np.array([1.0, 2.0]), np.zeros(3))
    assert r == pytest.approx([0.5, 0.5, 1.5])


def test_strict_priority_preempts_lower_queue():
    r = allocate(inc([[0], [0]], 1), np.array([5.0]), np.array([2, 1]))
    assert r == pytest.approx([0, 5])


def test_lower_queue_gets_what_higher_leaves_work_conservation():
    # high-priority flow capped at 1 by its second link; low flow gets 9 on link 0
    r = allocate(inc([[0, 1], [0]], 2), np.array([10.0, 1.0]), np.array([0, 3]))
    assert r == pytest.approx([1, 9])
    assert r.sum() == pytest.approx(10)


def test_a_flow_below_on_one_hop_gets_what_is_left_there():
    # f0 has queue 0 on link 0 but queue 4 on link 1, where f1 (queue 1) fills the link:
    # f0 is held at what link 1 leaves, whatever its priority on link 0
    pairs = (np.array([0, 0, 1]), np.array([0, 1, 1]))
    r = allocate(pairs, np.array([10.0, 3.0]), [0, 4, 1], per_crossing=True)
    assert r == pytest.approx([0, 3])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_feasible_and_work_conserving(data):
    links = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(1, 8))
    paths = [
        sorted(set(data.draw(st.lists(st.integers(0, links - 1), min_size=1, max_size=3))))
        for _ in range(n)
    ]
    cap = np.array(data.draw(st.lists(st.floats(0.5, 10), min_size=links, max_size=links)))
    level = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    m = inc(paths, links)
    r = allocate(m, cap, level)
    load = m.T @ r
    assert (r >= -1e-9).all()
    assert (load <= cap + 1e-6).all()
    # every flow crosses at least one saturated link (nobody could grow alone)
    saturated = load >= cap - 1e-6
    for i, p in enumerate(paths):
        assert saturated[p].any(), (i, p, r, load, cap)


def test_contention_penalty_counts_distinct_tasks_per_queue():
    # two flows of one task: no penalty; two tasks: efficiency 2/(2+r)
    r = allocate(inc([[0], [0]], 1), np.array([10.0]), np.zeros(2), np.array([7, 7]), 0.5)
    assert r == pytest.approx([5, 5])
    r = allocate(inc([[0], [0]], 1), np.array([10.0]), np.zeros(2), np.array([3, 9]), 0.5)
    assert r.sum() == pytest.approx(10 * 2 / 2.5)
    # strict priority: one task per queue, no penalty
    r = allocate(inc([[0], [0]], 1), np.array([10.0]), np.array([0, 1]), np.array([3, 9]), 0.5)
    assert r == pytest.approx([10, 0])


def test_pair_arrays_and_matrix_give_the_same_rates():
    m = inc([[0, 1], [0], [1]], 2)
    coo = m.tocoo()
    a = allocate(m, np.array([1.0, 2.0]), np.zeros(3))
    b = allocate((coo.row, coo.col), np.array([1.0, 2.0]), np.zeros(3))
    assert a == pytest.approx(b)


def crossing(paths: list[list[tuple[int, int]]]) -> tuple[tuple[np.ndarray, np.ndarray], list]:
    """(flow, link) pairs and per-crossing queues of paths of (link, queue) hops."""
    pf = [i for i, p in enumerate(paths) for _ in p]
    pl = [link for p in paths for link, _ in p]
    return (np.array(pf), np.array(pl)), [q for p in paths for _, q in p]


def virtual_links(paths: list[list[tuple[int, int]]]) -> tuple[np.ndarray, ...]:
    """The (flow, virtual link) of every crossing of ``paths``, virtual links numbered
    link by link, queues from the highest, and each one's link and first queue on it:
    the crossings as ``newton_end`` and ``offer_sweep`` take them."""
    (pf, pl), pq = crossing(paths)
    span = int(max(pq)) + 1
    keys, cv = np.unique(pl * span + np.asarray(pq), return_inverse=True)
    vlink = keys // span
    lfirst = np.searchsorted(vlink, vlink).astype(np.int64)
    return pf.astype(np.int64), cv.astype(np.int64), vlink, lfirst


@pytest.mark.parametrize(
    "paths, want, middle",
    [
        ([[(0, 0), (3, 0)], [(0, 1), (3, 0)]], [1, 0], [0.5, 0.5]),  # ab
        (
            [[(0, 0), (3, 0)], [(0, 1), (4, 0)], [(1, 0), (4, 0)], [(1, 1), (3, 0)]],
            [1, 0, 1, 0],
            [0.5] * 4,
        ),  # cross
    ],
    ids=["ab", "cross"],
)
def test_a_pooled_queue_cycle_settles_where_the_upstream_queue_decides(paths, want, middle):
    """The pooled-queue bench's cases (NIC bands 0 and 1 pooled in one queue of the
    receiver's port, links 0-2 NICs, 3-5 ports): the cycle solved by offers gives the
    upper NIC band the link, as TCP does; filled part by part, the rounds settle in the
    continuum's middle."""
    pairs, queues = crossing(paths)
    got = allocate_settled(pairs, np.ones(6), np.array(queues), per_crossing=True)
    assert got.settled and got.rates == pytest.approx(want, abs=1e-12)
    rounds = allocate_settled(pairs, np.ones(6), np.array(queues), per_crossing=True,
                              max_cycle=0)  # fmt: skip
    assert rounds.rates == pytest.approx(middle, abs=1e-9)


def test_each_link_serves_a_flow_by_its_own_queue_there():
    """The issue's example: on a shared 10-unit NIC, A has NIC band 1 (receiver band 5)
    and B NIC band 2 (receiver band 1), receivers apart. A priority qdisc serves A first.
    Filling each flow at its worst queue on the path (the old model) gave B everything."""
    pairs, queues = crossing([[(0, 1), (1, 5)], [(0, 2), (2, 1)]])
    r = allocate(pairs, np.array([10.0, 10.0, 10.0]), queues, per_crossing=True)
    assert r == pytest.approx([10, 0])


def test_same_queue_flows_share_fairly_when_one_is_held_back_elsewhere():
    """A and D share link 0 in queue 1; on link 1, E (queue 0) is above D, and E is capped
    at 8 by link 2. E takes 8 of link 1, D the 2 left, A the 8 D leaves on link 0 (a
    filling that let A run ahead while D waited would give A 9 or 10)."""
    pairs, queues = crossing([[(0, 1)], [(0, 1), (1, 1)], [(1, 0), (2, 0)]])
    r = allocate(pairs, np.array([10.0, 10.0, 8.0]), queues, per_crossing=True)
    assert r == pytest.approx([8, 2, 8])


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_per_link_queues_from_one_global_order_are_feasible_and_saturate(data):
    """Queues per link taken from one global rank (as bands are): the fixed point is
    feasible and every flow crosses a saturated link (nobody could grow alone)."""
    links = data.draw(st.integers(1, 5))
    n = data.draw(st.integers(1, 8))
    paths = [
        sorted(set(data.draw(st.lists(st.integers(0, links - 1), min_size=1, max_size=3))))
        for _ in range(n)
    ]
    rank = data.draw(st.permutations(range(n)))
    cap = np.array(data.draw(st.lists(st.floats(0.5, 10), min_size=links, max_size=links)))
    merge = data.draw(st.integers(1, 3))  # ranks past a few share a queue, as bands do
    hops = [[(link, min(rank[i], merge)) for link in p] for i, p in enumerate(paths)]
    pairs, queues = crossing(hops)
    r = allocate(pairs, cap, queues, per_crossing=True)
    load = np.bincount(pairs[1], weights=r[pairs[0]], minlength=links)
    assert (r >= -1e-9).all()
    assert (load <= cap + 1e-6).all()
    saturated = load >= cap - 1e-6
    for i, p in enumerate(paths):
        assert saturated[p].any(), (i, p, r, load, cap)


def _random_instance(data: st.DataObject) -> tuple:
    links = data.draw(st.integers(1, 6))
    n = data.draw(st.integers(1, 10))
    paths = [
        data.draw(st.lists(st.integers(0, links - 1), min_size=1, max_size=4)) for _ in range(n)
    ]
    hops = [[(link, data.draw(st.integers(0, 4))) for link in p] for p in paths]
    pairs, queues = crossing(hops)
    cap = np.array(data.draw(st.lists(st.floats(0.5, 10), min_size=links, max_size=links)))
    task = np.array(data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    penalty = data.draw(st.sampled_from([0.0, 0.25, 1.0]))
    start = data.draw(st.none() | st.just(1)) and np.array(
        data.draw(st.lists(st.floats(0, 5), min_size=n, max_size=n))
    )
    ended = None  # flows that ended at the last event: in the start's use only
    if start is not None:
        ended = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    return pairs, cap, np.array(queues), task, penalty, start, ended


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_compiled_kernel_gives_the_numpy_reference_rates(data):
    """Arbitrary per-crossing queues (priority cycles included, so the worst-queue
    fallback runs too), repeated links, contention, warm starts and flows that ended
    (their start in the first round's use only): the compiled allocator and the
    plain-numpy reference agree, and a flow that ended gets no rate."""
    pairs, cap, queues, task, penalty, start, ended = _random_instance(data)
    cycle = data.draw(st.sampled_from([0, MAX_CYCLE]))  # cycles part by part, by offers
    kw = {"per_crossing": True, "start": start, "ended": ended, "max_cycle": cycle}
    got = allocate(pairs, cap, queues, task, penalty, **kw)
    want = allocate_reference(pairs, cap, queues, task, penalty, **kw)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)
    if ended is not None:
        assert (got[ended] == 0.0).all()


def test_a_flow_crossing_a_queue_again_is_not_held_by_its_own_offer_there() -> None:
    """Flows that cross link 0's queue 0 two and three times, in a cycle solved by offers
    with the contention penalty (found by the hypothesis test above). A crossing's demand
    is the least offer of its flow's other queues: read off its own queue's other
    crossings, the level fed back to itself and swung between a level and infinity, the
    sweeps did not settle and the fallback decided, where the reference settled."""
    hops = [[(0, 0), (0, 4)], [(0, 0), (0, 0), (0, 0), (1, 3)],
            [(0, 3), (0, 0), (0, 0), (0, 2)], [(0, 2), (0, 0), (0, 1), (0, 3)], [(1, 0)],
            [(0, 2), (0, 4)], [(0, 2), (0, 2), (0, 2)], [(0, 4)], [(1, 0)]]  # fmt: skip
    pairs, queues = crossing(hops)
    cap, task = np.array([1.1, 2.0]), np.array([0, 0, 1, 0, 0, 0, 2, 0, 0])
    got = allocate_settled(pairs, cap, np.array(queues), task, 0.25, per_crossing=True)
    want = allocate_reference(pairs, cap, np.array(queues), task, 0.25, per_crossing=True)
    assert got.settled
    assert got.rates == pytest.approx(want, rel=1e-9, abs=1e-9)
    assert got.rates[6] == pytest.approx(0.22 / 0.7)  # the rule's, where the fallback gave 0.37


def _kernel(pf: list, pl: list, pq: list, start: list, gone: list, rounds: int) -> tuple:
    from grouper.simulator.allocator_kernel import allocate_kernel

    n = len(start)
    a = (np.asarray(x, dtype=np.int64) for x in (pf, pl, pq))
    return allocate_kernel(
        *a, np.zeros(len(pf), np.int64), np.ones(2), 0.0, n, np.asarray(start, float), True,
        np.asarray(gone, bool), 1e-12, rounds, rounds, MAX_CYCLE,
    )  # fmt: skip


def test_a_flow_that_ended_holds_its_queue_in_the_first_round_only() -> None:
    """Flow 0 ended at rate 1 on link 0's top queue; flow 1 waits below it. The first
    round starts from flow 0's use, so queue 1 is closed and the round does not settle
    (one round: the fallback decides); the second gives flow 1 the link. The next
    allocation's start is the last round's rates: flow 1's 0 after the fallback (which
    gave it the link), its rate once the rounds settle."""
    case = ([0, 1], [0, 0], [0, 1], [1.0, 0.0], [True, False])
    rates, settled, restart = _kernel(*case, rounds=1)
    assert not settled and rates.tolist() == [0.0, 1.0] and restart.tolist() == [0.0, 0.0]
    rates, settled, restart = _kernel(*case, rounds=2)
    assert settled and rates.tolist() == restart.tolist() == [0.0, 1.0]


def test_a_queue_that_holds_only_flows_that_ended_is_not_waited_for() -> None:
    """Link 0 holds only flows that ended (its queue 1's capacity moves when queue 0's
    use goes); link 1's flow settles in the first round: so does the allocation."""
    rates, settled, _ = _kernel([0, 1, 2], [0, 0, 1], [0, 1, 0], [1.0, 0.5, 0.0],
                             [True, True, False], rounds=1)  # fmt: skip
    assert settled and rates.tolist() == [0.0, 0.0, 1.0]
