"""``queue_order.component_order``: the components in groups (the cycles of "has a queue
just above one of"), the groups in an order where every queue follows the queues above
it, checked against scipy's strongly connected components; a cycle's components in the
order of its sweep, checked against the reference's depth-first search."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.simulator.queue_order import component_order
from tests.unit.allocator_reference import queue_groups, queue_relation


@st.composite
def _queues(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    """Queues on links (``vlink``, sorted: the queues of a link from the top), each in a
    component or in none (-1), every component with a queue."""
    nc = draw(st.integers(1, 12))
    links = draw(st.lists(st.integers(1, 6), min_size=1, max_size=8))
    vlink = np.repeat(np.arange(len(links)), links)
    comp = np.asarray(
        draw(st.lists(st.integers(-1, nc - 1), min_size=len(vlink), max_size=len(vlink)))
    )
    used = np.unique(comp[comp >= 0])
    if len(used) == 0:
        comp[0], used = 0, np.array([0])
    renumber = np.full(nc, -1)
    renumber[used] = np.arange(len(used))
    comp = np.where(comp >= 0, renumber[np.maximum(comp, 0)], -1)
    return comp.astype(np.int64), vlink.astype(np.int64), len(used)


@settings(max_examples=300, deadline=None)
@given(_queues())
def test_groups_are_the_cycles_in_an_order_every_queue_follows_those_above(
    queues: tuple[np.ndarray, np.ndarray, int],
) -> None:
    comp, vlink, nc = queues
    order, gstart, cyc = component_order(comp, vlink, nc)
    assert sorted(order.tolist()) == list(range(nc))
    group = np.empty(nc, np.int64)
    for g in range(len(gstart) - 1):
        group[order[gstart[g] : gstart[g + 1]]] = g
    pairs, loops = queue_relation(comp, vlink)
    scc = {frozenset(g): g for g in queue_groups(comp, vlink)}  # scipy's, swept in order
    ours = [order[gstart[g] : gstart[g + 1]].tolist() for g in range(len(cyc))]
    assert {frozenset(g) for g in ours} == set(scc)
    for g in ours:  # a cycle's components in the order of the sweep
        assert g == scc[frozenset(g)]
    for a, b in pairs:  # every group after the groups above it
        assert group[a] <= group[b], (a, b)
    for g in range(len(gstart) - 1):
        members = order[gstart[g] : gstart[g + 1]]
        assert cyc[g] == (len(members) > 1 or int(members[0]) in loops)


@settings(max_examples=200, deadline=None)
@given(_queues(), st.randoms(use_true_random=False))
def test_a_cycles_sweep_does_not_depend_on_how_components_are_numbered(
    queues: tuple[np.ndarray, np.ndarray, int], rnd
) -> None:
    """The fast path numbers its parts otherwise than the allocator its components: the
    same components renumbered are swept in the same order."""
    comp, vlink, nc = queues
    perm = np.arange(nc)
    rnd.shuffle(perm)
    renamed = np.where(comp >= 0, perm[np.maximum(comp, 0)], -1)

    def sweeps(c: np.ndarray, back: np.ndarray) -> set[tuple[int, ...]]:
        order, gstart, _ = component_order(c, vlink, nc)
        groups = (order[gstart[g] : gstart[g + 1]] for g in range(len(gstart) - 1))
        return {tuple(back[g].tolist()) for g in groups}

    assert sweeps(renamed, np.argsort(perm)) == sweeps(comp, np.arange(nc))
