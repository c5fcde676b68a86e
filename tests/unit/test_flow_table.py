"""``FlowTable``: a job's flows as arrays read as the tuple of ``FlowSpec`` they stand
for, and ``flow_arrays`` giving the same arrays and the same errors for both forms."""

from __future__ import annotations

import math
import pickle
from copy import deepcopy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.errors import ConfigError
from grouper.pda.flow_table import FlowTable, flow_arrays
from grouper.pda.model import FlowSpec

HOSTS = ("a", "b", "c", "d")
INDEX = {"a": 0, "b": 1, "c": 2}  # "d" is unknown to the fabric

sizes = st.one_of(
    st.floats(min_value=1.0, max_value=1e12),
    st.sampled_from([0.0, -1.0, math.inf, math.nan]),
)
rows = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), sizes), min_size=0, max_size=12)


def _both(flows: list[tuple[int, int, float]]) -> tuple[FlowTable, tuple[FlowSpec, ...]]:
    table = FlowTable(
        HOSTS,
        np.asarray([s for s, _, _ in flows], np.int64),
        np.asarray([d for _, d, _ in flows], np.int64),
        np.asarray([b for _, _, b in flows], float),
    )
    specs = tuple(FlowSpec(HOSTS[s], HOSTS[d], b) for s, d, b in flows)
    return table, specs


def _arrays_or_error(flows: object) -> object:
    try:
        return [a.tolist() for a in flow_arrays(flows, INDEX, "j")]  # type: ignore[arg-type]
    except ConfigError as exc:
        return ("error", exc.path, str(exc))


@settings(max_examples=300, deadline=None)
@given(rows)
def test_flow_arrays_agree_on_both_forms_including_the_first_error(
    flows: list[tuple[int, int, float]],
) -> None:
    table, specs = _both(flows)
    got, want = _arrays_or_error(table), _arrays_or_error(specs)
    if isinstance(want, list):  # nan != nan: compare the byte columns' reprs
        assert got[:2] == want[:2] and repr(got[2]) == repr(want[2])
    else:
        assert got == want


@settings(max_examples=100, deadline=None)
@given(rows)
def test_a_table_reads_as_its_tuple(flows: list[tuple[int, int, float]]) -> None:
    table, specs = _both([f for f in flows if not math.isnan(f[2])])
    want = tuple(FlowSpec(f.src, f.dst, f.bytes) for f in specs)
    assert tuple(table) == want
    assert table == want and len(table) == len(want)
    assert [table[i] for i in range(len(table))] == list(want)
    assert table[1:3] == want[1:3]
    assert hash(table) == hash(want)


def test_errors_name_the_flow_and_the_field() -> None:
    table, _ = _both([(0, 1, 5.0), (1, 3, 5.0)])
    with pytest.raises(ConfigError, match=r"unknown host 'd'") as exc:
        flow_arrays(table, INDEX, "cojobs[2].jobs[0]")
    assert exc.value.path == "cojobs[2].jobs[0].flows[1].dst"
    table, _ = _both([(0, 1, 5.0), (1, 2, 0.0)])
    with pytest.raises(ConfigError, match="must be positive, got 0.0") as exc:
        flow_arrays(table, INDEX, "j")
    assert exc.value.path == "j.flows[1].bytes"


def test_a_table_keeps_its_own_read_only_copy_through_pickle_and_deepcopy() -> None:
    src = np.asarray([0, 1])
    table = FlowTable(HOSTS, src, np.asarray([1, 2]), np.asarray([3.0, 4.0]))
    src[0] = 2  # the caller's array changes later: the table does not
    assert table[0] == FlowSpec("a", "b", 3.0)
    with pytest.raises(ValueError, match="read-only"):
        table.nbytes[0] = 1.0
    for copy in (pickle.loads(pickle.dumps(table)), deepcopy(table)):
        assert copy == table and not copy.nbytes.flags.writeable
    out = flow_arrays(table, INDEX)
    out[2][0] = 9.0  # what flow_arrays returns is the caller's to change
    assert table[0].bytes == 3.0


@pytest.mark.parametrize(
    ("src", "dst", "nbytes", "problem"),
    [
        ([0, 4], [1, 1], [1.0, 1.0], "outside hosts"),
        ([0, -1], [1, 1], [1.0, 1.0], "outside hosts"),
        ([0], [1, 2], [1.0], "differ in length"),
    ],
)
def test_a_table_refuses_indices_it_cannot_name(
    src: list[int], dst: list[int], nbytes: list[float], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        FlowTable(HOSTS, np.asarray(src), np.asarray(dst), np.asarray(nbytes))


def test_a_table_refuses_a_host_named_twice() -> None:
    """Two used indices for one name would make ``src != dst`` on indices wrong for it;
    a name repeated among hosts no flow uses does no harm."""
    with pytest.raises(ValueError, match="named twice"):
        FlowTable(("a", "b", "a"), np.asarray([0]), np.asarray([2]), np.asarray([1.0]))
    table = FlowTable(("a", "b", "a"), np.asarray([0]), np.asarray([1]), np.asarray([1.0]))
    assert flow_arrays(table, {"a": 0, "b": 1})[1].tolist() == [1]
