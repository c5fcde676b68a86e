"""The column memo (``pda.columns``): a snapshot patched at the cojobs that changed is
the snapshot made afresh, whatever changed."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.errors import ConfigError
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.snapshot import FlowTables, Snapshot, build_snapshot
from tests.unit.test_snapshot import HOSTS, _cojob, cojob_st

CHANGES = ("same", "progress", "started", "weight", "barrier", "arrival", "stages", "flows")


def _changed(cj: Cojob, how: str, x: int) -> Cojob:
    """``cj`` as a new object with one thing changed (``same``: the very object)."""
    jobs = cj.jobs
    if how == "same":
        return cj
    if how == "progress":
        return dataclasses.replace(cj, jobs=tuple(dataclasses.replace(j, done=x) for j in jobs))
    if how == "started":
        return dataclasses.replace(cj, stage_started=(float(x),) * x)
    if how == "weight":
        return dataclasses.replace(
            cj, jobs=(dataclasses.replace(jobs[0], weight=1.0 + x),) + jobs[1:]
        )
    if how == "barrier":
        return dataclasses.replace(cj, barrier=not cj.barrier)
    if how == "arrival":
        return dataclasses.replace(cj, arrival=cj.arrival + x)
    if how == "stages":  # another shape: the memo is not patched
        stages = cj.stage_iterations + (x + 1,)
        return dataclasses.replace(cj, stage_iterations=stages, jobs=tuple(
            dataclasses.replace(j, stages=None) for j in jobs))  # fmt: skip
    first = jobs[0]  # "flows": a job's flows carry other bytes (a new flows tuple)
    flows = tuple(dataclasses.replace(f, bytes=f.bytes * 2) for f in first.flows)
    return dataclasses.replace(cj, jobs=(dataclasses.replace(first, flows=flows),) + jobs[1:])


def _same(a: Snapshot, b: Snapshot) -> None:
    for f in dataclasses.fields(Snapshot):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if hasattr(x, "toarray"):
            x, y = x.toarray(), y.toarray()
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name


@settings(max_examples=150, deadline=None)
@given(
    specs=st.lists(cojob_st, min_size=1, max_size=5),
    changes=st.lists(
        st.tuples(st.sampled_from(CHANGES), st.integers(0, 6)), min_size=5, max_size=5
    ),
    known=st.booleans(),
    drop=st.booleans(),
)
def test_a_patched_snapshot_is_the_snapshot_made_afresh(specs, changes, known, drop):
    """After a snapshot of some cojobs, the next one (some replaced by new objects with
    progress, start times, weights, barrier or arrival changed, or another shape or new
    flows, or one cojob gone) equals the snapshot made without the memo, field by field,
    and so does the one after (the memo patched twice)."""
    cojobs = [_cojob(g, s) for g, s in enumerate(specs)]
    tables = FlowTables()
    build_snapshot(cojobs, HOSTS, known_survivors=known, tables=tables)
    for _ in range(2):
        cojobs = [_changed(cj, how, x) for cj, (how, x) in zip(cojobs, changes, strict=False)]
        if drop and len(cojobs) > 1:
            cojobs = cojobs[1:]
        memo = build_snapshot(cojobs, HOSTS, known_survivors=known, tables=tables)
        _same(memo, build_snapshot(cojobs, HOSTS, known_survivors=known))


def test_progress_patches_the_columns_and_keeps_the_id_lists():
    """Progress in one cojob of two patches the last columns (the id lists are the same
    objects, the stage ids too while the same stages are unfinished) and moves only that
    cojob's remaining load."""
    a = Cojob("a", (4, 4), (Job.explicit("x", [FlowSpec("h1", "h2", 1.0)]),))
    b = Cojob("b", (4,), (Job.explicit("y", [FlowSpec("h3", "h4", 2.0)]),))
    tables = FlowTables()
    first = build_snapshot([a, b], HOSTS, known_survivors=False, tables=tables)
    a2 = dataclasses.replace(a, jobs=(dataclasses.replace(a.jobs[0], done=2),))
    second = build_snapshot([a2, b], HOSTS, known_survivors=False, tables=tables)
    assert second.cojob_ids is first.cojob_ids and second.job_ids is first.job_ids
    assert second.stage_ids is first.stage_ids
    assert second.stage_loads.toarray()[:, 0].tolist() == [2.0, 4.0, 0.0]
    assert second.stage_loads.toarray()[2].tolist() == first.stage_loads.toarray()[2].tolist()


def test_a_cojob_renamed_to_a_known_id_is_refused_after_a_patchable_snapshot():
    """A cojob replaced by one with another cojob's id is not patched over: the
    duplicate is refused as without the memo."""
    job = Job.explicit("x", [FlowSpec("h1", "h2", 1.0)])
    a, b = Cojob("a", (4,), (job,)), Cojob("b", (4,), (job,))
    tables = FlowTables()
    build_snapshot([a, b], HOSTS, tables=tables)
    with pytest.raises(ConfigError, match=r"cojobs\[1\]\.id: duplicate cojob id 'a'"):
        build_snapshot([a, dataclasses.replace(b, cojob_id="a")], HOSTS, tables=tables)
