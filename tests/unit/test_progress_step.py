"""Progress in steps (``scheduling.progress_step``): an agent reports a job whose only
change is its iterations once they cross a step of their stage, stage and job ends at
once, and the coordinator's view never lags by a step or more."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.agent.updates import UpdateSource
from grouper.common.cluster_config import parse_cluster_config
from grouper.common.cluster_doc import cluster_doc
from grouper.common.errors import ConfigError
from grouper.common.progress import reported_done
from grouper.coordinator.state import AgentState
from grouper.v1 import agent_pb2 as pb

HOSTS = {"h1", "h2"}
STAGES = [100, 40]


def state(done: int, *, finished: bool = False, port: int = 5000) -> pb.JobState:
    return pb.JobState(
        job=pb.JobRegistration(
            cojob_id="C",
            job_id="j",
            arch="flows",
            stage_iterations=STAGES,
            flows=[pb.FlowSpec(src_host="h1", dst_host="h2", dst_port=port, bytes_per_iteration=1)],
        ),
        iterations_done=done,
        finished=finished,
    )


def test_reported_done_rounds_down_to_the_last_step_of_its_stage() -> None:
    assert [reported_done(d, STAGES, 0.1) for d in (0, 9, 10, 19, 99)] == [0, 0, 10, 10, 90]
    # the second stage starts exactly, and steps by 10% of its own 40 iterations
    assert [reported_done(d, STAGES, 0.1) for d in (100, 103, 104, 139)] == [100, 100, 104, 136]
    assert reported_done(140, STAGES, 0.1) == 140, "the job's end is exact"
    assert reported_done(57, STAGES, 0.0) == 57, "step 0: every change"
    assert reported_done(57, [1000], 0.0001) == 57, "a step is at least one iteration"


def test_an_agent_reports_a_job_once_per_step_and_stage_ends_at_once() -> None:
    src = UpdateSource("h1", epoch=3)
    src.step = 0.1
    src.full({("C", "j"): state(0)}, 0, False)
    sent = []
    for done in range(1, 141):
        up = src.delta({("C", "j"): state(done)}, 0, False)
        if up is not None:
            assert [js.iterations_done for js in up.jobs] == [done], "the state now, not the step"
            sent.append(done)
    assert sent == list(range(10, 100, 10)) + [100] + list(range(104, 140, 4)) + [140]


def test_other_changes_are_reported_within_a_step() -> None:
    src = UpdateSource("h1", epoch=3)
    src.step = 0.1
    src.full({("C", "j"): state(0)}, 0, False)
    assert src.delta({("C", "j"): state(3)}, 0, False) is None
    up = src.delta({("C", "j"): state(4, port=6000)}, 0, False)  # a flow changed
    assert up is not None and up.jobs[0].iterations_done == 4
    up = src.delta({("C", "j"): state(5, port=6000, finished=True)}, 0, False)
    assert up is not None and up.jobs[0].finished
    assert src.delta({("C", "j"): state(5, port=6000, finished=True)}, 0, False) is None


def test_without_a_step_every_iteration_is_reported() -> None:
    src = UpdateSource("h1", epoch=3)
    src.full({("C", "j"): state(0)}, 0, False)
    assert all(src.delta({("C", "j"): state(d)}, 0, False) is not None for d in range(1, 30))


@settings(max_examples=200, deadline=None)
@given(
    step=st.sampled_from([0.0, 0.01, 0.05, 0.25, 0.5]),
    gains=st.lists(st.integers(0, 30), min_size=1, max_size=40),
)
def test_the_coordinators_view_lags_by_less_than_a_step(step: float, gains: list[int]) -> None:
    """Whatever the pace, what the coordinator holds is the agent's state at its last
    report, at most one step of the current stage behind (exact at stage ends)."""
    src, coord = UpdateSource("h1", epoch=3), AgentState("h1")
    src.step = step
    assert coord.apply(src.full({("C", "j"): state(0)}, 0, False), HOSTS)[0] == "applied"
    done, total = 0, sum(STAGES)
    for g in gains:
        done = min(total, done + g)
        up = src.delta({("C", "j"): state(done)}, 0, False)
        if up is not None:
            assert coord.apply(up, HOSTS)[0] == "applied"
        seen = coord.reports()[0].iterations_done
        assert seen <= done
        assert reported_done(done, STAGES, step) <= seen, "never a whole step behind"
        if done in (0, STAGES[0], total):
            assert seen == done


def test_the_cluster_config_bounds_the_step() -> None:
    hosts = [("h1", "10.0.0.1", "eth0"), ("h2", "10.0.0.2", "eth0")]
    cfg = parse_cluster_config(cluster_doc(hosts, scheduling={"progress_step": 0.03}))
    assert cfg.scheduling.progress_step == 0.03
    assert parse_cluster_config(cluster_doc(hosts)).scheduling.progress_step == 0.0
    for bad in (-0.1, 0.6, "x", float("nan")):
        try:
            parse_cluster_config(cluster_doc(hosts, scheduling={"progress_step": bad}))
        except ConfigError as exc:
            assert str(exc).startswith("scheduling.progress_step"), exc
        else:
            raise AssertionError(f"{bad!r} accepted")


def test_the_simulators_planner_sees_progress_in_steps() -> None:
    """``grouper simulate --progress-step``: every plan is made from the jobs'
    iterations as agents would report them (on a step of their stage), where the same
    run with exact progress plans from counts between steps too."""
    from grouper.common.queues import QueueConfig
    from grouper.simulator.run import engine_for, topology_of
    from grouper.workloads.generators import testbed as make_testbed

    wl = make_testbed(rounds=1, scale=0.005)
    topo = topology_of(wl)

    def seen(step: float) -> list[tuple[tuple[int, ...], int]]:
        eng = engine_for(wl, "grouper", topo, 0.5, QueueConfig(), progress_step=step)
        eng.trace = []
        eng.run()
        return [(cj.stage_iterations, job.done) for _, cojobs, _ in eng.trace
                for cj in cojobs for job in cj.jobs]  # fmt: skip

    stepped, exact = seen(0.25), seen(0.0)
    assert stepped and all(reported_done(d, its, 0.25) == d for its, d in stepped)
    assert any(reported_done(d, its, 0.25) != d for its, d in exact)


def test_the_progress_interval_reaches_the_agents_sync_and_is_bounded() -> None:
    """``scheduling.progress_interval``: how often agents send progress (the sync's
    ``interval``); 0 keeps a quarter of the period. Past the period, or above 0 but
    under the floor, it is refused naming the field."""
    from grouper.coordinator.loop import sync_request

    hosts = [("h1", "10.0.0.1", "eth0"), ("h2", "10.0.0.2", "eth0")]

    def interval(**scheduling: object) -> float:
        doc = cluster_doc(hosts, scheduling={"period": 2.0, **scheduling},
                          failure={"agent_timeout": 9.0, "plan_ttl": 10.0})  # fmt: skip
        return sync_request(parse_cluster_config(doc)).interval  # a 3 s heartbeat

    assert interval() == 0.5
    assert interval(progress_interval=2.0) == 2.0
    assert interval(progress_interval=0.05) == 0.05
    for bad in (-1, 0.01, 2.5, "x", float("nan")):
        try:
            interval(progress_interval=bad)
        except ConfigError as exc:
            assert str(exc).startswith("scheduling.progress_interval: "), exc
        else:
            raise AssertionError(f"{bad!r} accepted")
    short_beat = cluster_doc(hosts, scheduling={"period": 2.0, "progress_interval": 2.0},
                             failure={"agent_timeout": 3.0, "plan_ttl": 10.0})  # fmt: skip
    try:
        parse_cluster_config(short_beat)
    except ConfigError as exc:
        assert "heartbeat" in str(exc) and str(exc).startswith("scheduling.progress_interval")
    else:
        raise AssertionError("a progress interval past the heartbeat accepted")
