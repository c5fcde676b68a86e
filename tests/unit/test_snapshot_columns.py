"""The column memo (``pda.columns``): a snapshot patched at the cojobs that changed is
the snapshot made afresh, whatever changed."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.errors import ConfigError
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.pda.snapshot import FlowTables, Snapshot, build_snapshot
from tests.unit.test_snapshot import HOSTS, _cojob, cojob_st

PATCHED = ("same", "progress", "started", "weight", "barrier", "arrival", "survivors")
RESHAPED = ("stages", "flows", "bad")  # the whole pass again (or an error)


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
    if how == "survivors":  # a job's known stage count alone (the same shape)
        k = len(cj.stage_iterations)
        return dataclasses.replace(
            cj, jobs=(dataclasses.replace(jobs[0], stages=1 + x % k),) + jobs[1:]
        )
    if how == "bad":  # a flow to a host outside the list: the build fails
        flows = (FlowSpec("h1", "nowhere", 1.0),)
        return dataclasses.replace(cj, jobs=(dataclasses.replace(jobs[0], flows=flows),) + jobs[1:])
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


# mostly changes a patch takes (any reshape, a cojob gone, the view flipped or other
# hosts make the whole pass run again): a round of five is patched about half the time
how_st = st.sampled_from(PATCHED * 6 + RESHAPED)
change_st = st.lists(st.tuples(how_st, st.integers(0, 6)), min_size=5, max_size=5)
rarely = st.sampled_from((False,) * 7 + (True,))


@settings(max_examples=200, deadline=None)
@given(
    specs=st.lists(cojob_st, min_size=1, max_size=5),
    rounds=st.lists(st.tuples(change_st, rarely, rarely, rarely), min_size=1, max_size=3),
    known=st.booleans(),
)
def test_a_patched_snapshot_is_the_snapshot_made_afresh(specs, rounds, known):
    """Snapshots of some cojobs in a row on one memo, each after some cojobs were
    replaced by new objects (progress, start times, weights, barrier, arrival or a
    known stage count changed, another shape, new flows, bad flows that fail the
    build), at times one cojob gone, the survivors view flipped or the host list
    changed: every snapshot that builds equals the one made without the memo, field by
    field, and one that fails fails as it does without it."""
    cojobs = [_cojob(g, s) for g, s in enumerate(specs)]
    tables = FlowTables()
    build_snapshot(cojobs, HOSTS, known_survivors=known, tables=tables)
    for changes, drop, flip, other_hosts in rounds:
        good = cojobs
        cojobs = [_changed(cj, how, x) for cj, (how, x) in zip(cojobs, changes, strict=False)]
        if drop and len(cojobs) > 1:
            cojobs = cojobs[1:]
        known ^= flip
        hosts = [*HOSTS, "h5"] if other_hosts else HOSTS
        try:
            want = build_snapshot(cojobs, hosts, known_survivors=known)
        except ConfigError as exc:
            with pytest.raises(ConfigError, match=re.escape(str(exc))):
                build_snapshot(cojobs, hosts, known_survivors=known, tables=tables)
            cojobs = good  # the memo's: the next round patches them
            continue
        _same(build_snapshot(cojobs, hosts, known_survivors=known, tables=tables), want)


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


def test_bad_flows_are_refused_again_when_their_cojob_progresses():
    """A build that fails leaves the memo as it was: the same bad cojob with progress
    (the same flows, so a patch could take it) is checked and refused again."""
    good = Cojob("a", (4,), (Job.explicit("x", [FlowSpec("h1", "h2", 1.0)]),))
    bad = Cojob("b", (4,), (Job.explicit("y", [FlowSpec("h1", "zz", 1.0)]),))
    tables = FlowTables()
    build_snapshot([good, dataclasses.replace(bad, cojob_id="c", jobs=good.jobs)], HOSTS,
                   tables=tables)  # fmt: skip
    for done in (0, 1):
        moved = dataclasses.replace(bad, jobs=(dataclasses.replace(bad.jobs[0], done=done),))
        with pytest.raises(ConfigError, match=r"cojobs\[1\]\.jobs\[0\]\.flows\[0\]\.dst"):
            build_snapshot([good, moved], HOSTS, tables=tables)
