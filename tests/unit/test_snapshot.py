"""Traffic per iteration and remaining stage loads on ports."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.errors import ConfigError
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.snapshot import FlowTables, build_snapshot
from tests.unit.snapshot_reference import reference_snapshot

HOSTS = ["h1", "h2", "h3", "h4"]


def port(snap, host, side):
    h = snap.hosts.index(host)
    return h if side == "in" else len(snap.hosts) + h


def test_ps_traffic_per_iteration():
    job = Job.ps("j", 100.0, ["h1", "h2"], ["h3", "h4"])
    # each worker sends 100/2 to each server and gets as much back
    assert sorted((f.src, f.dst, f.bytes) for f in job.flows) == sorted(
        [(w, s, 50.0) for w in ("h1", "h2") for s in ("h3", "h4")]
        + [(s, w, 50.0) for w in ("h1", "h2") for s in ("h3", "h4")]
    )


def test_ring_traffic_per_iteration():
    job = Job.ring("j", 90.0, ["h1", "h2", "h3"])
    assert [(f.src, f.dst) for f in job.flows] == [("h1", "h2"), ("h2", "h3"), ("h3", "h1")]
    assert all(f.bytes == pytest.approx(2 * 2 / 3 * 90.0) for f in job.flows)


def test_remaining_load_counts_progress_and_skips_same_host_traffic():
    job = Job.ps("j", 10.0, ["h1", "h2"], ["h2"], done=150)  # h2 -> h2 is local
    cj = Cojob("c", (100, 200), (job,))
    snap = build_snapshot([cj], HOSTS)
    assert snap.stage_ids == ["c/2"]  # stage 1 (100 iterations) is finished
    loads = snap.stage_loads.toarray()[0]
    # 150 iterations left of stage 2; only h1 <-> h2 crosses the network, 10 B each way
    assert loads[port(snap, "h1", "in")] == pytest.approx(1500.0)
    assert loads[port(snap, "h2", "out")] == pytest.approx(1500.0)
    assert loads[port(snap, "h2", "in")] == pytest.approx(1500.0)
    assert loads[port(snap, "h1", "out")] == pytest.approx(1500.0)
    assert loads.sum() == pytest.approx(4 * 1500.0)


def test_known_survivors_only_offline():
    cj = Cojob(
        "c",
        (1, 1),
        (
            Job.explicit("a", [FlowSpec("h1", "h2", 1.0)]),
            Job.explicit("b", [FlowSpec("h1", "h2", 3.0)], stages=1),
        ),
    )
    offline = build_snapshot([cj], HOSTS, known_survivors=True).stage_loads.toarray()
    online = build_snapshot([cj], HOSTS, known_survivors=False).stage_loads.toarray()
    assert offline[:, 0].tolist() == [4.0, 1.0]
    assert online[:, 0].tolist() == [4.0, 4.0]


def test_stage_chain_links_unfinished_stages():
    cj = Cojob("c", (1, 1, 1), (Job.explicit("a", [FlowSpec("h1", "h2", 1.0)], done=1),))
    snap = build_snapshot([cj], HOSTS)
    assert snap.stage_ids == ["c/2", "c/3"]
    assert snap.stage_prev.tolist() == [-1, 0]
    assert snap.stage_number.tolist() == [2, 3]
    assert snap.job_stage.tolist() == [0]


def test_a_job_waiting_at_the_stage_barrier_does_not_activate_the_next_stage():
    """Job a finished its 2 iterations of stage 1, job b has one left: a waits at the
    barrier, so both are in stage 1 and stage 2 takes no band on h1 yet (it used to
    take band 2 as soon as a reached the barrier)."""
    from grouper.common.queues import QueueConfig
    from grouper.pda.policies import flow_priorities, schedule

    cj = Cojob(
        "c",
        (2, 2),
        (
            Job.explicit("a", [FlowSpec("h1", "h2", 1.0)], done=2),
            Job.explicit("b", [FlowSpec("h1", "h3", 1.0)], done=1),
        ),
    )
    snap = build_snapshot([cj], HOSTS, known_survivors=False)
    assert snap.stage_ids == ["c/1", "c/2"]
    assert snap.job_stage.tolist() == [0, 0]
    fp = flow_priorities(snap, schedule(snap, "grouper"), QueueConfig())
    assert fp.band.tolist() == [1, 1], "both flows carry stage 1's band"


flows_st = st.lists(
    st.tuples(st.sampled_from(HOSTS), st.sampled_from(HOSTS), st.sampled_from([1.0, 2.5, 4.0])),
    min_size=1,
    max_size=3,
)
job_st = st.tuples(flows_st, st.integers(-1, 12), st.sampled_from([0.5, 1.0, 3.0]), st.booleans())
cojob_st = st.tuples(
    st.lists(st.integers(1, 4), min_size=1, max_size=4),  # stage iterations
    st.lists(job_st, min_size=1, max_size=4),
    st.lists(st.sampled_from([math.inf, 0.5, 2.0]), max_size=5),  # stage start times
    st.booleans(),  # barrier
    st.sampled_from([0.0, 1.0, 3.0]),  # arrival
)


SHARED_TABLES = FlowTables()


def _cojob(g: int, spec: tuple) -> Cojob:
    stages, jobs, started, barrier, arrival = spec
    built = tuple(
        Job.explicit(
            f"j{i}", [FlowSpec(*f) for f in flows], done=done, weight=w,
            stages=(1 + i % len(stages)) if known else None,
        )
        for i, (flows, done, w, known) in enumerate(jobs)
    )  # fmt: skip
    return Cojob(f"c{g}", tuple(stages), built, arrival, tuple(started), barrier)


@settings(max_examples=150, deadline=None)
@given(specs=st.lists(cojob_st, min_size=0, max_size=5), known=st.booleans())
def test_vectorized_snapshot_matches_the_loop_by_loop_reference(specs, known):
    """Every stage row, chain link, start time, weight, load and job stage agrees with a
    plain loop over cojobs, stages and jobs, with and without the flow-table memo (one
    memo across all examples too, so that it sees other jobs than last time)."""
    cojobs = [_cojob(g, s) for g, s in enumerate(specs)]
    ref = reference_snapshot(cojobs, HOSTS, known)
    tables = FlowTables()
    for memo in (None, tables, tables, SHARED_TABLES, SHARED_TABLES):
        snap = build_snapshot(cojobs, HOSTS, known_survivors=known, tables=memo)
        assert snap.stage_ids == ref["stage_ids"]
        for name in ("stage_cojob", "stage_number", "stage_prev", "job_stage"):
            assert getattr(snap, name).tolist() == ref[name], name
        for name in ("stage_started", "stage_weight", "job_remaining", "job_weight"):
            np.testing.assert_allclose(getattr(snap, name), ref[name], err_msg=name)
        loads = snap.stage_loads.toarray()
        np.testing.assert_allclose(loads, np.reshape(ref["stage_loads"], loads.shape))


def test_a_memo_never_lets_bad_flows_through_twice():
    """Flows naming an unknown host are refused every time, also when the flow-table
    memo saw them fail before (it used to record their ids first, then skip the check),
    and the memo still serves good jobs afterwards."""
    good = Cojob("c", (2,), (Job.explicit("a", [FlowSpec("h1", "h2", 1.0)]),))
    bad = Cojob("d", (2,), (Job.explicit("b", [FlowSpec("h1", "zz", 1.0)]),))
    tables = FlowTables()
    build_snapshot([good], HOSTS, tables=tables)
    for _ in range(2):
        with pytest.raises(ConfigError, match=r"cojobs\[1\]\.jobs\[0\]\.flows\[0\]\.dst"):
            build_snapshot([good, bad], HOSTS, tables=tables)
    snap = build_snapshot([good], HOSTS, tables=tables)
    assert snap.stage_loads.toarray()[0].sum() == pytest.approx(4.0)
