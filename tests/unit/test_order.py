"""PDA (Algorithm 1): fig3, chain rule, ties, zero loads, properties, Lemma 2."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import sparse

from grouper.pda.lowerbound import brute_force_single_port, lp_lower_bound, single_port_sct
from grouper.pda.order import pda_order, primal_dual_order, stage_weights
from grouper.pda.snapshot import build_snapshot
from grouper.workloads import load_workload
from tests.unit.helpers import one_port_cojobs, random_chain_matrix


def test_fig3_order_is_the_papers_optimum():
    wl = load_workload("builtin:fig3")
    snap = build_snapshot(wl.cojobs, wl.hosts)
    res = pda_order(snap)
    assert [snap.stage_ids[i] for i in res.order] == ["A/1", "A/2", "B/1", "B/2"]
    sct = single_port_sct(snap.stage_loads.toarray()[:, 0], res.order)
    assert sct / 4 == 6.5


def test_weights_follow_lines_3_to_11():
    # w_k = 1 + alpha_{k+1} - alpha_k with alpha_k = 1 - 2^-k
    w = stage_weights(np.array([1, 2, 3, 4]))
    assert np.allclose(w, [1.25, 1.125, 1.0625, 1.03125])


def test_chain_rule_keeps_heavy_first_stage_before_light_second():
    # cojob 0: stage 1 heavy (10), stage 2 light (1); cojob 1: one stage of 5.
    loads = sparse.csr_matrix(np.array([[10.0], [1.0], [5.0]]))
    w = stage_weights(np.array([1, 2, 1]))
    literal = primal_dual_order(loads, w).order.tolist()
    assert literal.index(1) < literal.index(0), "literal Algorithm 1 inverts the chain"
    chained = primal_dual_order(loads, w, prev=np.array([-1, 0, -1])).order.tolist()
    assert chained.index(0) < chained.index(1)


def test_port_ties_pick_lowest_index_and_ratio_ties_put_later_key_last():
    # two identical stages on two equally loaded ports: port 0 is the bottleneck; equal
    # ratios -> the larger tie key (later cojob) goes last.
    loads = sparse.csr_matrix(np.array([[1.0, 1.0], [1.0, 1.0]]))
    res = primal_dual_order(loads, np.ones(2), tie_key=np.array([0.0, 1.0]))
    assert res.order.tolist() == [0, 1]
    assert res.port[1] == 0
    res = primal_dual_order(loads, np.ones(2), tie_key=np.array([1.0, 0.0]))
    assert res.order.tolist() == [1, 0]


def test_order_does_not_depend_on_how_stages_are_numbered():
    """Relabel the stages (rows) at random: without ties, PDA must place the same stages
    in the same positions (an index must only ever break exact ties)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        loads, prev, num = random_chain_matrix(rng, 6, [3, 2, 4, 1, 2])
        perm = rng.permutation(loads.shape[0])  # new row i is old row perm[i]
        inv = np.argsort(perm)
        prev2 = np.where(prev[perm] >= 0, inv[np.maximum(prev[perm], 0)], -1)
        a = primal_dual_order(loads, stage_weights(num), prev).order
        b = primal_dual_order(loads[perm], stage_weights(num[perm]), prev2).order
        assert perm[b].tolist() == a.tolist()


def test_zero_load_stage_does_not_block_its_cojob():
    # cojob 0: stage 1 heavy on port 0, stage 2 has no load (all traffic host-local);
    # cojob 1: a light stage on port 0. The zero stage is placed last at once, so its
    # heavy predecessor competes normally and goes after the light stage.
    loads = sparse.csr_matrix(np.array([[10.0, 0.0], [0.0, 0.0], [1.0, 0.0]]))
    res = primal_dual_order(loads, stage_weights(np.array([1, 2, 1])), np.array([-1, 0, -1]))
    assert res.order.tolist() == [2, 0, 1]
    assert res.port[2] == -1 and res.rho[2] == 0.0


def test_no_candidate_on_bottleneck_port_falls_back_to_next_port():
    # port 0 is most loaded but only by cojob 0's first stage, blocked by its second
    # stage that loads port 1 only. The step must use port 1.
    loads = sparse.csr_matrix(np.array([[10.0, 0.0], [0.0, 1.0], [0.0, 2.0]]))
    res = primal_dual_order(loads, stage_weights(np.array([1, 2, 1])), np.array([-1, 0, -1]))
    assert res.port[2] == 1
    assert sorted(res.order.tolist()) == [0, 1, 2]
    assert res.order.tolist().index(0) < res.order.tolist().index(1)


chains_strategy = st.lists(st.integers(1, 4), min_size=1, max_size=8)


@settings(max_examples=150, deadline=None)
@given(chains=chains_strategy, ports=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_order_is_a_permutation_that_keeps_every_chain(chains, ports, seed):
    loads, prev, num = random_chain_matrix(np.random.default_rng(seed), ports, chains)
    res = primal_dual_order(loads, stage_weights(num), prev)
    n = sum(chains)
    assert sorted(res.order.tolist()) == list(range(n))
    pos = res.position()
    for s in range(n):
        if prev[s] >= 0:
            assert pos[prev[s]] < pos[s]


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 12), ports=st.integers(1, 6), seed=st.integers(0, 2**31))
def test_single_stage_duals_stay_feasible(n, ports, seed):
    """Lemma 2 (c)-(d): without chains adjusted weights and beta never go negative."""
    loads, prev, num = random_chain_matrix(np.random.default_rng(seed), ports, [1] * n)
    res = primal_dual_order(loads, stage_weights(num), prev, trace=True)
    assert (res.rho >= 0).all()
    assert res.min_adjusted_weight_all >= -1e-9


@settings(max_examples=60, deadline=None)
@given(loads=st.lists(st.floats(0.1, 10.0), min_size=1, max_size=10))
def test_single_port_single_stage_within_twice_the_lp_bound(loads):
    hosts, cojobs = one_port_cojobs([[x] for x in loads])
    snap = build_snapshot(cojobs, hosts)
    order = pda_order(snap).order
    sct = single_port_sct(snap.stage_loads.toarray()[:, 0], order)
    lb = lp_lower_bound(snap).value
    assert lb <= sct * (1 + 1e-6)
    assert sct <= 2 * lb * (1 + 1e-6)


@settings(max_examples=60, deadline=None)
@given(
    chains=st.lists(
        st.lists(st.floats(0.1, 10.0), min_size=1, max_size=3), min_size=1, max_size=4
    ).filter(lambda c: sum(map(len, c)) <= 7)
)
def test_tiny_instances_against_brute_force(chains):
    hosts, cojobs = one_port_cojobs(chains)
    snap = build_snapshot(cojobs, hosts)
    col = snap.stage_loads.toarray()[:, 0]
    opt, _ = brute_force_single_port(col, snap.stage_prev)
    lb = lp_lower_bound(snap).value
    order = pda_order(snap).order
    position = {int(s): i for i, s in enumerate(order)}
    assert sorted(position) == list(range(len(col))), "every stage ordered once"
    prev = snap.stage_prev
    assert all(prev[s] < 0 or position[prev[s]] < position[s] for s in position), "chains kept"
    sct = single_port_sct(col, order)
    assert lb <= opt * (1 + 1e-6)
    if all(len(c) == 1 for c in chains):
        assert sct <= 2 * opt * (1 + 1e-6)


def test_exact_ties_follow_the_tie_key_even_when_weights_reach_zero():
    """Every stage on one port with weight proportional to load: every step is a tie, and
    after the first one the tied adjusted weights are all 0 up to rounding residues
    (e.g. 0.7 x 3 - 3 x 0.7 = 4e-16). The documented rule must decide, not the residues:
    among ties the largest tie key goes last."""
    vals = np.array([0.7, 0.3, 0.1, 0.1])
    tie_key = np.array([3.0, 1.0, 2.0, 0.0])
    got = primal_dual_order(sparse.csr_matrix(vals.reshape(-1, 1)), 3.0 * vals, None, tie_key)
    assert got.order.tolist() == [3, 1, 2, 0]  # ascending tie key
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(2, 8))
        vals = np.round(rng.uniform(0.1, 1.0, n), 1)
        key = rng.permutation(n).astype(float)
        loads = sparse.csr_matrix(vals.reshape(-1, 1))
        order = primal_dual_order(loads, rng.choice([0.3, 1.1, 3.0, 7.0]) * vals, None, key)
        assert order.order.tolist() == np.argsort(key).tolist()


@settings(max_examples=40, deadline=None)
@given(
    chains=st.lists(st.lists(st.floats(0.1, 10.0), min_size=1, max_size=3), min_size=2, max_size=6)
)
def test_a_bound_stopped_early_is_weaker_and_still_below_the_optimum(chains):
    hosts, cojobs = one_port_cojobs(chains)
    snap = build_snapshot(cojobs, hosts)
    full = lp_lower_bound(snap)
    early = lp_lower_bound(snap, seconds=1e-9)  # one round: the seed chain only
    assert full.converged and early.rounds == 1
    assert early.value <= full.value * (1 + 1e-9)
    if sum(map(len, chains)) <= 7:
        opt, _ = brute_force_single_port(snap.stage_loads.toarray()[:, 0], snap.stage_prev)
        assert early.value <= opt * (1 + 1e-9)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), hosts=st.integers(2, 6), stages=st.integers(2, 24))
def test_seeding_the_lp_with_pdas_order_reaches_the_same_optimum(seed, hosts, stages):
    """The seed chain adds valid cuts only: over many ports, chains and jobs, the seeded
    LP converges to the optimum of the LP that starts from no cut."""
    from grouper.workloads.random_instance import random_cojobs

    names, cojobs = random_cojobs(hosts, stages, seed)
    snap = build_snapshot(cojobs, names)
    seeded, plain = lp_lower_bound(snap, seed=True), lp_lower_bound(snap, seed=False)
    assert seeded.converged and plain.converged
    assert seeded.value == pytest.approx(plain.value, rel=1e-6)
    assert seeded.cuts > 0


def test_knowing_the_losers_can_make_pda_worse_because_it_compares_chain_tails():
    """The instance of docs/explanation/pda-adadual.md (offline vs online): on one link, c0's stages
    load 16 then 6 (its losers leave after stage 1), c1's one stage 8. PDA's backward
    step weighs only the last stage of each chain: 1.125 / 6 > 1.25 / 8, so c1/1 goes
    last (average SCT 22.67). Online, c0/2 is assumed to load 8 (1.125 / 8 < 1.25 / 8),
    c0/2 goes last and the order happens to be the optimum (20.67)."""
    from grouper.pda.model import Cojob, FlowSpec, Job

    def job(name: str, nbytes: float, **kw: object) -> Job:
        return Job.explicit(name, [FlowSpec("h1", "h2", nbytes)], **kw)

    c0 = Cojob("c0", (2, 1), (job("j0", 3), job("j1", 3, stages=2), job("j2", 2, stages=1)))
    c1 = Cojob("c1", (1,), (job("j0", 1), job("j1", 3, stages=1), job("j2", 4, stages=1)))
    for known, want in ((True, ["c0/1", "c0/2", "c1/1"]), (False, ["c1/1", "c0/1", "c0/2"])):
        snap = build_snapshot([c0, c1], ["h1", "h2"], known_survivors=known)
        assert [snap.stage_ids[i] for i in pda_order(snap).order] == want, known
