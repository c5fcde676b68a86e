"""Coordinator logic without root: update validation (fuzzed), merging, planning."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.coordinator.merge import Merger, merge_reports
from grouper.coordinator.planner import plan_hosts
from grouper.coordinator.snapshot import JobReport, ReportedFlow, ReportedJob
from grouper.coordinator.state import AgentState
from grouper.pda.planning import Planner
from grouper.v1 import agent_pb2 as pb

HOSTS = {"h1", "h2", "h3"}


def fresh(policy: str) -> Planner:
    """A planner whose first plan orders afresh, as the coordinator's first cycle."""
    return Planner(policy, QueueConfig(), 1.0)


def js(cojob="A", job="j", src="h1", dst="h2", port=5001, stages=(4, 8), done=0, **kw):
    return pb.JobState(
        job=pb.JobRegistration(
            cojob_id=cojob,
            job_id=job,
            arch="flows",
            stage_iterations=list(stages),
            arrival=10.0,
            flows=[pb.FlowSpec(src_host=src, dst_host=dst, dst_port=port, bytes_per_iteration=1e6)],
            **kw,
        ),
        iterations_done=done,
    )


def full(jobs, host="h1", state=None, seq=1):
    """Apply a full update of ``jobs`` from ``host``: (the jobs held, the errors)."""
    state = state or AgentState("h1")
    verdict, errors = state.apply(
        pb.StateUpdate(host=host, epoch=7, seq=seq, full=True, jobs=jobs), HOSTS
    )
    assert verdict == "applied"
    return state.reports(), errors


def test_update_from_another_host_is_refused():
    with pytest.raises(ConfigError, match="^update.host: agent for 'h1' reported as 'h9'"):
        full([], host="h9")


def test_bad_jobs_in_an_update_are_dropped_with_the_field_named():
    jobs, errors = full(
        [js(), js(job="bad", dst="zz"), js(job="over", done=99), js(job="neg", stages=(0,))]
    )
    assert [j.job.job_id for j in jobs] == ["j"]
    assert errors == [
        "update.jobs[1].flows[0].dst_host: unknown host 'zz'",
        "update.jobs[2].iterations_done: exceeds 12: 99",
        "update.jobs[3].stage_iterations[0]: must be at least 1, got 0",
    ]


def test_agents_only_speak_for_flows_their_host_sends():
    jobs, _ = full([js(src="h2", dst="h1")])
    assert jobs[0].job.flows == {}


flow_specs = st.builds(
    pb.FlowSpec,
    src_host=st.sampled_from(["h1", "h2", "", "x"]),
    dst_host=st.sampled_from(["h1", "h2", "h3", "?"]),
    dst_port=st.integers(0, 70000),
    src_port=st.integers(0, 70000),
    bytes_per_iteration=st.floats(allow_nan=True, allow_infinity=True),
)
registrations = st.builds(
    pb.JobRegistration,
    cojob_id=st.text(max_size=4),
    job_id=st.text(max_size=4),
    arch=st.sampled_from(["ps", "ring", "flows", "x", ""]),
    stage_iterations=st.lists(st.integers(0, 2**32 - 1), max_size=3),
    model_bytes=st.floats(allow_nan=True),
    flows=st.lists(flow_specs, max_size=3),
    compute_time=st.floats(allow_nan=True),
    arrival=st.floats(allow_nan=True),
)
reports = st.builds(
    pb.HostReport,
    host=st.just("h1"),
    jobs=st.lists(
        st.builds(pb.JobState, job=registrations, iterations_done=st.integers(0, 2**64 - 1)),
        max_size=4,
    ),
)


@settings(max_examples=300, deadline=None)
@given(report=reports)
def test_fuzz_reports_never_crash_and_what_passes_can_be_scheduled(report):
    jobs, errors = full(report.jobs)
    keys = {(j.job.cojob_id, j.job.job_id) for j in report.jobs}
    assert {j.job.key for j in jobs} <= keys and len(jobs) + len(errors) >= len(keys)
    assert all(e.startswith("update.jobs[") for e in errors)
    model = merge_reports({"h1": jobs}, ("h1", "h2", "h3"))
    plan_hosts(model, fresh("grouper"), 0.0)


by_key = st.builds(
    pb.JobState,
    key=st.builds(pb.JobKey, cojob_id=st.sampled_from(["c", "", "x" * 300]), job_id=st.text()),
    iterations_done=st.integers(0, 2**64 - 1),
    finished=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(report=reports, later=st.lists(by_key, max_size=4), steps=st.lists(
    st.tuples(st.integers(0, 3), st.integers(0, 2**64 - 1)), max_size=4))  # fmt: skip
def test_fuzz_states_by_key_never_crash_and_take_only_a_held_registration(report, later, steps):
    """A delta of states by key after a full update: a key held moves its job's progress
    on its held registration (or is refused with the field named); any other is refused
    in one line, and nothing is held that was not registered whole."""
    state = AgentState("h1")
    flow = pb.FlowSpec(src_host="h1", dst_host="h2", dst_port=5000, bytes_per_iteration=1)
    valid = [
        pb.JobState(
            job=pb.JobRegistration(
                cojob_id="cojob", job_id=j, arch="flows", stage_iterations=[4, 8], flows=[flow]
            )
        )
        for j in ("j", "k")
    ]  # fmt: skip (no generated cojob id is 5 characters long: these stay held)
    full([*valid, *report.jobs], state=state)
    held = dict(state.jobs)
    assert {("cojob", "j"), ("cojob", "k")} <= set(held)
    keys = sorted(held)
    states = list(later)
    for at, done in steps:  # progress of jobs held, by key
        if keys:
            k = keys[at % len(keys)]
            states.append(pb.JobState(key=pb.JobKey(cojob_id=k[0], job_id=k[1]),
                                      iterations_done=done))  # fmt: skip
    verdict, errors = state.apply(pb.StateUpdate(host="h1", epoch=7, seq=2, jobs=states), HOSTS)
    assert verdict == "applied"
    assert all(e.startswith("update.jobs[") and len(e) < 400 for e in errors)
    assert set(state.jobs) <= set(held), "a state by key never adds a job"
    for k, (raw, r) in state.jobs.items():
        assert raw == held[k][0] and r.job is held[k][1].job, "the registration held"
    model = merge_reports({"h1": state.reports()}, ("h1", "h2", "h3"))
    plan_hosts(model, fresh("grouper"), 0.0)


def rj(cojob, job, flows, done=0, finished=False, stages=(4, 8), arrival=0.0):
    template = ReportedJob(
        cojob,
        job,
        "flows",
        stages,
        0.0,
        0.0,
        arrival,
        {f: ReportedFlow(f, s, d, b) for f, s, d, b in flows},
    )
    return JobReport(template, done, finished)


def test_merge_unites_flows_takes_slowest_progress_and_drops_finished_jobs():
    reports = {
        "h1": [
            rj("A", "j", [("A/j/h2:1", "h1", "h2", 5.0)], done=6, arrival=3.0),
            rj("C", "k", [("C/k/h2:3", "h1", "h2", 1.0)], finished=True),
        ],
        "h2": [
            rj("A", "j", [("A/j/h1:2", "h2", "h1", 5.0)], done=2, arrival=1.0),
            rj("B", "j", [("B/j/h3:9", "h2", "h3", 1.0)], arrival=2.0),
        ],
    }
    model = merge_reports(reports, ("h1", "h2", "h3"))
    assert [c.cojob_id for c in model.cojobs] == ["A", "B"]  # by arrival; C finished
    a = model.cojobs[0]
    assert a.arrival == 1.0 and model.job_done.tolist() == [2, 0]  # the slowest host's
    assert model.flow_ids == ["A/j/h2:1", "A/j/h1:2", "B/j/h3:9"]  # by (sender, id)


def test_same_flow_id_from_two_senders_is_two_flows():
    # two PS workers push to the same server port: same id, one flow on each sender
    reports = {
        "h1": [rj("A", "j", [("A/j/h3:7", "h1", "h3", 5.0)])],
        "h2": [rj("A", "j", [("A/j/h3:7", "h2", "h3", 5.0)])],
    }
    model = merge_reports(reports, ("h1", "h2", "h3"))
    assert model.flow_src == ["h1", "h2"]
    planned = plan_hosts(model, fresh("grouper"), 0.0)
    assert planned.plans["h1"] == planned.plans["h2"] == {"A/j/h3:7": (1, 48)}


def test_plans_key_flows_by_id_and_rank_stages_per_sender():
    reports = {
        "h1": [
            rj("A", "j", [("A/j/h2:1", "h1", "h2", 1.0)], arrival=0.0),
            rj("B", "j", [("B/j/h2:2", "h1", "h2", 9.0)], arrival=1.0),
        ]
    }
    planned = plan_hosts(merge_reports(reports, ("h1", "h2")), fresh("grouper"), 0.0)
    assert planned.order == ["A/1", "A/2", "B/1", "B/2"]
    assert planned.plans["h1"] == {"A/j/h2:1": (1, 48), "B/j/h2:2": (2, 40)}
    # the receiver learns the port-matched flows it receives: its ACKs on them are ours
    ctl = (0, QueueConfig().dscp_table[0])
    assert planned.plans["h2"] == {"inbound:h1:1": ctl, "inbound:h1:2": ctl}
    fs = plan_hosts(merge_reports(reports, ("h1", "h2")), fresh("fs"), 0.0)
    assert set(fs.plans["h1"].values()) == {(6, QueueConfig().dscp_table[6])}


def test_validation_is_reused_while_progress_is_read_anew():
    state = AgentState("h1")
    jobs, errors = full([js(done=1), js(job="bad", dst="zz")], state=state)
    delta = pb.StateUpdate(host="h1", epoch=7, seq=2, jobs=[js(done=5)])
    assert state.apply(delta, HOSTS) == ("applied", [])
    again = state.reports()
    assert [j.iterations_done for j in jobs] == [1] and [j.iterations_done for j in again] == [5]
    assert errors == ["update.jobs[1].flows[0].dst_host: unknown host 'zz'"]
    assert again[0].job is jobs[0].job  # the validated template was reused


def test_merger_rebuilds_flows_only_when_templates_change_and_keeps_untouched_cojobs():
    a = rj("A", "j", [("A/j/h2:1", "h1", "h2", 5.0)])
    c = rj("C", "j", [("C/j/h2:2", "h1", "h2", 1.0)], arrival=5.0)
    merger = Merger(("h1", "h2"))
    merger.set_host("h1", {a.job.key: a, c.job.key: c}, [a.job.key, c.job.key])
    m1 = merger.model()
    merger.set_host("h1", {a.job.key: JobReport(a.job, 3)}, [a.job.key])
    m2 = merger.model()
    assert m1.cojobs[0].jobs[0].flows is m2.cojobs[0].jobs[0].flows
    assert m2.job_done.tolist() == [3, 0] and m1.job_done.tolist() == [0, 0]
    assert m1.cojobs == m2.cojobs and all(
        a is b for a, b in zip(m1.cojobs, m2.cojobs, strict=True)
    ), "progress is in job_done: no cojob is rebuilt for it"
    b = rj("A", "j", [("A/j/h2:1", "h1", "h2", 7.0)])
    merger.set_host("h1", {b.job.key: b}, [b.job.key])
    assert merger.model().cojobs[0].jobs[0].flows[0].bytes == 7.0
    assert len(merger.built) == 2, "one set of built flows per job"
    merger.set_host("h1", {}, [a.job.key, c.job.key])
    assert merger.model().cojobs == [] and merger.built == {}


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["h1", "h2"]),
            st.sampled_from("ABC"),
            st.sampled_from("jk"),
            st.integers(0, 14),
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.sampled_from([None, 1, 2]),
        ),  # fmt: skip
        min_size=1,
        max_size=25,
    )
)
def test_incremental_merge_equals_merging_from_scratch(steps):
    """After any sequence of per-host changes and stage starts, with cycles after some of
    them only (progress is folded in as it arrives, the rest at the next cycle), the
    Merger's model is the one merged from scratch out of the same reports (same cojobs,
    jobs, progress, stage start times and flow rows)."""
    held: dict[str, dict] = {"h1": {}, "h2": {}}
    templates: dict = {}
    started: dict[tuple[str, int], float] = {}
    merger = Merger(("h1", "h2", "h3"))
    for i, (host, cojob, job, done, finished, gone, cycle, stage) in enumerate(steps):
        key = (cojob, job)
        if gone:
            held[host].pop(key, None)
        else:  # a registration is validated once: its template object is reused
            other = "h3" if host == "h1" else "h1"
            flows = [(f"{cojob}/{job}/{other}:1", host, other, 2.0)]
            template = templates.setdefault((host, key), rj(cojob, job, flows).job)
            held[host][key] = JobReport(template, done, finished)
        merger.set_host(host, held[host], [key])
        if stage is not None and (cojob, stage) not in started:
            started[cojob, stage] = float(i)
            merger.touch(cojob)
        if not (cycle or i == len(steps) - 1):
            continue
        inc = merger.model(started)
        ref = merge_reports({h: list(j.values()) for h, j in held.items()}, ("h1", "h2", "h3"),
                            started)  # fmt: skip
        assert [(c.cojob_id, c.stage_iterations, c.arrival, c.stage_started)
                for c in inc.cojobs] == [
            (c.cojob_id, c.stage_iterations, c.arrival, c.stage_started) for c in ref.cojobs
        ]  # fmt: skip
        assert [[(j.job_id, j.flows) for j in c.jobs] for c in inc.cojobs] == [
            [(j.job_id, j.flows) for j in c.jobs] for c in ref.cojobs
        ]
        assert inc.job_done.tolist() == ref.job_done.tolist()
        assert (inc.flow_ids, inc.flow_src, inc.flow_inbound_dst, inc.flow_inbound_key) == (
            ref.flow_ids, ref.flow_src, ref.flow_inbound_dst, ref.flow_inbound_key)  # fmt: skip


def test_host_flows_of_jobs_known_by_their_processes_are_planned_by_id():
    """An agent reports a job found from its processes as host flows (no ports); the
    coordinator plans them under the same ``<cojob>/<job>/<host>:*`` ids the agent
    applies to every connection of the job to that host."""
    jobs, errors = full([js(port=0), js(cojob="B", port=0, stages=(40, 80))])
    assert errors == []
    assert [list(j.job.flows) for j in jobs] == [["A/j/h2:*"], ["B/j/h2:*"]]
    model = merge_reports({"h1": jobs}, ("h1", "h2", "h3"))
    planned = plan_hosts(model, fresh("grouper"), 0.0)
    assert planned.plans["h1"] == {"A/j/h2:*": (1, 48), "B/j/h2:*": (2, 40)}
    assert planned.plans["h2"] == {}, "host flows need no inbound entry: the receiver finds them"


def test_a_registered_weight_reaches_the_coordinators_order():
    """Two equal searches on one link: A goes first on the tie rule; with weight 4 in
    its registration (``grouper run --weight 4``), B does. 0 (unset) means 1."""
    for weight_b, first in ((0.0, "A/1"), (4.0, "B/1")):
        jobs, errors = full([js("A", port=5001), js("B", port=5002, weight=weight_b)])
        assert errors == []
        planned = plan_hosts(merge_reports({"h1": jobs}, ("h1", "h2", "h3")), fresh("grouper"), 0)
        assert planned.order[0] == first, weight_b


@pytest.mark.parametrize(
    ("weight", "error"),
    [
        (-1.0, "weight: must be at least 0, got -1.0"),
        (2e6, "weight: must be in (0, 1e+06], got 2e+06"),
        (float("nan"), "weight: must be finite, got nan"),
    ],
)
def test_a_bad_weight_is_refused_with_the_field_named(weight, error):
    _, errors = full([js(weight=weight)])
    assert errors == [f"update.jobs[0].{error}"]


@settings(max_examples=100, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["h1", "h2", "h3"]),
            st.sampled_from("ABCD"),
            st.sampled_from("jk"),
            st.integers(0, 12),
            st.booleans(),
        ),  # fmt: skip
        min_size=1,
        max_size=30,
    )
)
def test_plans_patched_from_the_last_cycle_equal_plans_made_afresh(steps):
    """A cycle whose model has the same flow rows as the last (only progress moved)
    patches the rows whose band or DSCP changed into copies of the last plans; after any
    sequence of registrations, progress and departures the plans are those made from
    scratch, and the last cycle's plan objects are left as they were."""
    hosts = ("h1", "h2", "h3", "h4")
    held: dict[str, dict] = {h: {} for h in hosts[:3]}
    templates: dict = {}
    merger = Merger(hosts)
    inc_planner = Planner("grouper", QueueConfig(), 0.0)  # orders afresh every time
    ref_planner = Planner("grouper", QueueConfig(), 0.0)
    last = None
    for i, (host, cojob, job, done, gone) in enumerate(steps):
        key = (cojob, job)
        if gone:
            held[host].pop(key, None)
        else:
            k = "ABCD".index(cojob) * 2 + "jk".index(job)
            flows = [(f"{cojob}/{job}/{d}:{k}", host, d, float(1 + (k * 7 + j) % 5))
                     for j, d in enumerate(h for h in hosts if h != host)]  # fmt: skip
            template = templates.setdefault((host, key), rj(cojob, job, flows, arrival=k).job)
            held[host][key] = JobReport(template, done)
        merger.set_host(host, held[host], [key])
        model = merger.model()
        before = {h: dict(p) for h, p in last.plans.items()} if last is not None else None
        inc = plan_hosts(model, inc_planner, float(i), last=last)
        ref = plan_hosts(model, ref_planner, float(i))
        assert inc.plans == ref.plans and inc.order == ref.order
        for h, (base, keys) in inc.patched.items():  # what a delta is built from
            assert base is last.plans[h] and inc.plans[h].keys() == base.keys()
            assert {k for k, v in inc.plans[h].items() if base[k] != v} <= set(keys)
        if last is not None:
            assert {h: dict(p) for h, p in last.plans.items()} == before, "old plans untouched"
        last = inc


def test_a_progress_only_cycle_patches_the_hosts_whose_bands_moved_and_keeps_the_rest():
    """Two cojobs on h1 -> h2 swap places in the order when A progresses; C on h3 -> h4
    is alone: h1's plan is a patched copy, h3's is the very same object."""
    a = rj("A", "j", [("A/j/h2:1", "h1", "h2", 1.0)], stages=(10,))
    b = rj("B", "j", [("B/j/h2:2", "h1", "h2", 4.0)], stages=(10,))
    c = rj("C", "j", [("C/j/h4:3", "h3", "h4", 1.0)], stages=(10,))
    merger = Merger(("h1", "h2", "h3", "h4"))
    merger.set_host("h1", {a.job.key: a, b.job.key: b}, [a.job.key, b.job.key])
    merger.set_host("h3", {c.job.key: c}, [c.job.key])
    planner = Planner("grouper", QueueConfig(), 0.0)
    first = plan_hosts(merger.model(), planner, 0.0)
    assert first.plans["h1"]["A/j/h2:1"][0] < first.plans["h1"]["B/j/h2:2"][0]
    # B is nearly done: 1 iteration of 4 bytes left against A's 10 of 1
    merger.set_host("h1", {a.job.key: a, b.job.key: JobReport(b.job, 9)}, [b.job.key])
    model = merger.model()
    assert first.rows is model.flow_ids, "progress only: the same flow rows"
    second = plan_hosts(model, planner, 1.0, last=first)
    assert second.plans["h1"]["B/j/h2:2"][0] < second.plans["h1"]["A/j/h2:1"][0]
    assert second.plans["h1"] is not first.plans["h1"]
    assert second.plans["h3"] is first.plans["h3"]
    assert set(second.patched) == {"h1"} and second.patched["h1"][0] is first.plans["h1"]
    assert second.plans == plan_hosts(model, Planner("grouper", QueueConfig(), 0.0), 1.0).plans


def test_a_ring_job_with_a_declared_model_is_ordered_before_its_connections():
    """Registered with ``--arch ring --model-bytes`` on two hosts, no connection yet: the
    coordinator orders its stages at once, as a ring over the hosts that run it."""

    def ring(done=0):
        template = ReportedJob("R", "j", "ring", (4, 8), 1e6, 0.0, 0.0, {})
        return JobReport(template, done, False)

    model = merge_reports({"h1": [ring()], "h3": [ring()]}, ("h1", "h2", "h3"))
    assert [c.cojob_id for c in model.cojobs] == ["R"]
    assert model.flow_ids == ["R/j/h3:*", "R/j/h1:*"] and model.flow_src == ["h1", "h3"]
    assert [f.bytes for f in model.cojobs[0].jobs[0].flows] == [1e6, 1e6]
    planned = plan_hosts(model, fresh("grouper"), 0.0)
    assert set(planned.plans["h1"]) == {"R/j/h3:*"}
    # a job of one host, or one without a model size, has no prior: nothing to order
    assert merge_reports({"h1": [ring()]}, ("h1", "h2")).cojobs == []
