"""The cross-field checks of a workload on jobs whose flows are a tuple of ``FlowSpec`` or
a ``FlowTable``: the same answers both ways, and the least simulated time against a
plain loop over the flows (what it computed before it read arrays)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.errors import ConfigError
from grouper.pda.flow_table import FlowTable, network_bytes
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.workloads.checks import check_job, least_sim_time
from grouper.workloads.model import Workload

HOSTS = ("h0", "h1", "h2", "h3")

flow_rows = st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 3), st.floats(1.0, 1e9)), min_size=1, max_size=6
)
cojob_rows = st.lists(
    st.tuples(
        st.lists(flow_rows, min_size=1, max_size=3),  # jobs
        st.one_of(st.floats(0.0, 100.0), st.just(math.inf)),  # arrival
        st.lists(st.integers(1, 3), min_size=1, max_size=3),  # iterations per stage
        st.booleans(),  # flows as a FlowTable
    ),
    min_size=1,
    max_size=4,
)


def _flows(rows: list[tuple[int, int, float]], table: bool) -> tuple | FlowTable:
    if table:
        s, d, b = (np.asarray([r[i] for r in rows]) for i in range(3))
        return FlowTable(HOSTS, s, d, b)
    return tuple(FlowSpec(HOSTS[s], HOSTS[d], b) for s, d, b in rows)


def _workload(cojobs: list, local: str) -> Workload:
    built = []
    for g, (jobs, arrival, iters, table) in enumerate(cojobs):
        js = tuple(
            Job(f"j{i}", "flows", _flows(rows, table), compute_time=0.5 * i)
            for i, rows in enumerate(jobs)
        )
        built.append(Cojob(f"c{g}", tuple(iters), js, arrival))
    return Workload("t", HOSTS, tuple(built), 1e6, "s", local_traffic=local)


def _plain_least(wl: Workload) -> float:
    """The loop over ``FlowSpec``s that ``least_sim_time`` replaced."""
    ports: dict[tuple[str, str], float] = {}
    end = 0.0
    for cj in wl.cojobs:
        if not math.isfinite(cj.arrival):
            continue
        for job in cj.jobs:
            n = sum(cj.stage_iterations[: job.stages or len(cj.stage_iterations)])
            flows = [f for f in job.flows if f.src != f.dst or wl.local_traffic == "ports"]
            per = max((f.bytes for f in flows), default=0.0) / wl.capacity
            end = max(end, cj.arrival + n * (job.compute_time + per))
            for f in flows:
                for port in (("up", f.src), ("down", f.dst)):
                    ports[port] = ports.get(port, 0.0) + n * f.bytes
    return max(end, max(ports.values(), default=0.0) / wl.capacity)


@settings(max_examples=200, deadline=None)
@given(cojob_rows, st.sampled_from(["drop", "ports"]))
def test_least_sim_time_is_the_plain_loops_on_either_form(cojobs: list, local: str) -> None:
    wl = _workload(cojobs, local)
    assert least_sim_time(wl) == pytest.approx(_plain_least(wl), rel=1e-12)


@settings(max_examples=200, deadline=None)
@given(flow_rows, st.booleans())
def test_network_bytes_and_check_job_agree_on_both_forms(rows: list, local: bool) -> None:
    as_tuple, as_table = _flows(rows, False), _flows(rows, True)
    want = [f.bytes for f in as_tuple if local or f.src != f.dst]
    assert network_bytes(as_tuple, local).tolist() == want
    assert network_bytes(as_table, local).tolist() == want
    outcomes = []
    for flows in (as_tuple, as_table):
        try:
            check_job(Job("j", "flows", flows), "cojobs[0].jobs[0]", 1e6, "s", local)
            outcomes.append("ok")
        except ConfigError as exc:
            outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
    if want:  # it reaches the network: fine, or one iteration too short to time
        assert outcomes[0] == "ok" or "alone, under" in outcomes[0]
    else:
        assert "never uses the network" in outcomes[0]


def test_a_flow_to_a_host_off_the_workload_is_named() -> None:
    job = Job("j", "flows", (FlowSpec("h0", "h1", 5.0), FlowSpec("h1", "elsewhere", 5.0)))
    wl = Workload("t", HOSTS, (Cojob("c", (1,), (job,)),), 1e6, "s")
    with pytest.raises(ConfigError, match="unknown host 'elsewhere'") as exc:
        least_sim_time(wl)
    assert exc.value.path == "cojobs[0].jobs[0].flows[1].dst"
