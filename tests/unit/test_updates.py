"""Agent updates -> coordinator state over a channel that drops, reorders and repeats
messages: the state held is never wrong (always the agent's state as of some update),
and it converges once messages get through again."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.agent.updates import UpdateSource
from grouper.coordinator.state import AgentState
from grouper.v1 import agent_pb2 as pb

HOSTS = {"h1", "h2"}


def state(job: str, done: int, finished: bool = False, size: int = 1) -> pb.JobState:
    return pb.JobState(
        job=pb.JobRegistration(
            cojob_id="C",
            job_id=job,
            arch="flows",
            stage_iterations=[10, 10],
            flows=[
                pb.FlowSpec(src_host="h1", dst_host="h2", dst_port=5000, bytes_per_iteration=size)
            ],
        ),
        iterations_done=done,
        finished=finished,
    )


def held(s: AgentState) -> dict[str, tuple[int, bytes]]:
    """Each job held: its iterations and its registration (as bytes)."""
    return {k[1]: (r.iterations_done, raw) for k, (raw, r) in s.jobs.items()}


class Agent:
    def __init__(self, by_key: bool = False) -> None:
        self.jobs: dict[tuple[str, str], pb.JobState] = {}
        self.source = UpdateSource("h1", epoch=5)
        self.source.by_key = by_key  # as the coordinator's sync sets it
        self.history: dict[int, dict[str, int]] = {}  # seq -> the state it described

    def view(self) -> dict[str, tuple[int, bytes]]:
        return {
            k[1]: (js.iterations_done, js.job.SerializeToString(deterministic=True))
            for k, js in self.jobs.items()
        }

    def full(self) -> pb.StateUpdate:
        up = self.source.full(self.jobs, 0, False)
        self.history[up.seq] = self.view()
        return up

    def delta(self, heartbeat: bool = False) -> pb.StateUpdate | None:
        up = self.source.delta(self.jobs, 0, False, heartbeat=heartbeat)
        if up is not None:
            self.history[up.seq] = self.view()
        return up


ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "progress", "reregister", "finish", "remove", "send"]),
        st.integers(0, 4),
    ),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=ops, seed=st.integers(0, 2**32 - 1), loss=st.sampled_from([0.0, 0.2, 0.5]),
    by_key=st.booleans(),
)  # fmt: skip
def test_lossy_reordering_channel_never_leaves_a_wrong_state(ops, seed, loss, by_key) -> None:
    """With and without known jobs' progress sent by key (``by_key``), and registrations
    that change under way."""
    rng = random.Random(seed)
    agent, coord = Agent(by_key), AgentState("h1")
    wire: list[pb.StateUpdate] = [agent.full()]  # the answer to the first sync
    resyncs = 0

    def deliver() -> None:
        nonlocal resyncs
        rng.shuffle(wire)  # reordered
        while wire:
            up = wire.pop()
            if rng.random() < loss:
                continue  # dropped
            if rng.random() < 0.1:
                wire.insert(0, up)  # and delivered twice
            verdict, errors = coord.apply(up, HOSTS)
            assert errors == []
            if verdict == "applied":
                assert held(coord) == agent.history[coord.seq], "held state is some update's"
                ended = {k for k, (_, r) in coord.jobs.items() if r.finished}
                assert coord.finished == ended, "the finished set mirrors the jobs held"
            if verdict == "gap":
                resyncs += 1
                wire.insert(0, agent.full())

    for op, k in ops:
        key = ("C", f"j{k}")
        if op == "add" and key not in agent.jobs:
            agent.jobs[key] = state(f"j{k}", 0)
        elif op == "progress" and key in agent.jobs:
            js = agent.jobs[key]
            size = js.job.flows[0].bytes_per_iteration
            agent.jobs[key] = state(js.job.job_id, min(20, js.iterations_done + 1 + k), size=size)
        elif op == "reregister" and key in agent.jobs:
            js = agent.jobs[key]
            agent.jobs[key] = state(js.job.job_id, js.iterations_done, size=2 + k)
        elif op == "finish" and key in agent.jobs:
            js = agent.jobs[key]
            size = js.job.flows[0].bytes_per_iteration
            agent.jobs[key] = state(js.job.job_id, js.iterations_done, finished=True, size=size)
        elif op == "remove":
            agent.jobs.pop(key, None)
        else:
            up = agent.delta()
            if up is not None:
                wire.append(up)
            deliver()
            if coord.awaiting_full and rng.random() < 0.5:  # the sync's answer was lost
                wire.append(agent.full())
    # the channel heals: heartbeats (an update even when nothing changed) reveal any gap,
    # and a sync's answer still owed is sent again after a heartbeat without it
    loss = 0.0
    for _ in range(3):
        wire.append(agent.delta(heartbeat=True))
        deliver()
        if coord.awaiting_full:
            wire.append(agent.full())
            deliver()
    assert not coord.awaiting_full
    assert held(coord) == agent.view()


def test_a_dropped_delta_is_a_gap_and_the_sync_restores_the_state() -> None:
    agent, coord = Agent(), AgentState("h1")
    assert coord.apply(agent.full(), HOSTS)[0] == "applied"
    agent.jobs["C", "a"] = state("a", 1)
    agent.delta()  # lost on the way
    agent.jobs["C", "a"] = state("a", 2)
    agent.jobs["C", "b"] = state("b", 0)
    late = agent.delta()
    assert coord.apply(late, HOSTS)[0] == "gap"
    assert coord.apply(late, HOSTS)[0] == "stale", "deltas wait for the full update"
    assert coord.apply(agent.full(), HOSTS)[0] == "applied"
    assert {k: d for k, (d, _) in held(coord).items()} == {"a": 2, "b": 0}


def test_a_new_epochs_full_update_replaces_the_state_and_an_old_epochs_delta_is_a_gap() -> None:
    old, coord = Agent(), AgentState("h1")
    old.jobs["C", "a"] = state("a", 3)
    coord.apply(old.full(), HOSTS)
    new = Agent()
    new.source.epoch = 6  # the agent restarted
    assert coord.apply(new.full(), HOSTS)[0] == "applied" and held(coord) == {}
    old.jobs["C", "a"] = state("a", 4)
    assert coord.apply(old.delta(), HOSTS)[0] == "gap"


def test_known_jobs_progress_by_key_and_a_changed_registration_goes_whole() -> None:
    agent, coord = Agent(by_key=True), AgentState("h1")
    agent.jobs["C", "a"] = state("a", 1)
    assert coord.apply(agent.full(), HOSTS) == ("applied", [])
    whole = state("a", 2).ByteSize()
    agent.jobs["C", "a"] = state("a", 2)
    up = agent.delta()
    assert not up.jobs[0].HasField("job"), "progress of a known registration: by key"
    assert (up.jobs[0].key.cojob_id, up.jobs[0].key.job_id) == ("C", "a")
    assert up.jobs[0].ByteSize() * 4 < whole  # 10 bytes against 43, 39 the registration
    assert coord.apply(up, HOSTS) == ("applied", [])
    agent.jobs["C", "a"] = state("a", 3, size=9)  # registered anew: sent whole
    up = agent.delta()
    assert up.jobs[0].job.flows[0].bytes_per_iteration == 9
    assert coord.apply(up, HOSTS) == ("applied", [])
    assert held(coord) == agent.view()
    plain = Agent()  # a coordinator that did not allow it gets every state whole
    plain.jobs["C", "a"] = state("a", 1)
    plain.full()
    plain.jobs["C", "a"] = state("a", 2)
    assert plain.delta().jobs[0].HasField("job")


def test_a_state_by_key_for_a_job_not_held_is_refused_naming_the_field() -> None:
    coord = AgentState("h1")
    bare = pb.JobState(key=pb.JobKey(cojob_id="C", job_id="x"), iterations_done=1)
    full = pb.StateUpdate(host="h1", epoch=5, seq=1, full=True, jobs=[bare])
    verdict, errors = coord.apply(full, HOSTS)
    assert verdict == "applied" and held(coord) == {}
    assert errors == [
        "update.jobs[0].job: missing, and no registration held for 'C'/'x' "
        "(never sent whole, or refused)"
    ]
    delta = pb.StateUpdate(host="h1", epoch=5, seq=2, jobs=[bare])
    assert coord.apply(delta, HOSTS) == ("applied", [errors[0]]) and held(coord) == {}
    long = pb.JobState(key=pb.JobKey(cojob_id="C" * 100_000, job_id="x"), iterations_done=1)
    delta = pb.StateUpdate(host="h1", epoch=5, seq=3, jobs=[long])
    _, errors = coord.apply(delta, HOSTS)
    assert len(errors) == 1 and len(errors[0]) < 200, "a hostile id is cut short in the error"
