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


def state(job: str, done: int, finished: bool = False) -> pb.JobState:
    return pb.JobState(
        job=pb.JobRegistration(
            cojob_id="C",
            job_id=job,
            arch="flows",
            stage_iterations=[10, 10],
            flows=[pb.FlowSpec(src_host="h1", dst_host="h2", dst_port=5000, bytes_per_iteration=1)],
        ),
        iterations_done=done,
        finished=finished,
    )


def held(s: AgentState) -> dict[str, int]:
    return {r.job.job_id: r.iterations_done for r in s.reports()}


class Agent:
    def __init__(self) -> None:
        self.jobs: dict[tuple[str, str], pb.JobState] = {}
        self.source = UpdateSource("h1", epoch=5)
        self.history: dict[int, dict[str, int]] = {}  # seq -> the state it described

    def view(self) -> dict[str, int]:
        return {k[1]: js.iterations_done for k, js in self.jobs.items()}

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
    st.tuples(st.sampled_from(["add", "progress", "finish", "remove", "send"]), st.integers(0, 4)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=ops, seed=st.integers(0, 2**32 - 1), loss=st.sampled_from([0.0, 0.2, 0.5]))
def test_lossy_reordering_channel_never_leaves_a_wrong_state(ops, seed, loss) -> None:
    rng = random.Random(seed)
    agent, coord = Agent(), AgentState("h1")
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
            agent.jobs[key] = state(js.job.job_id, min(20, js.iterations_done + 1 + k))
        elif op == "finish" and key in agent.jobs:
            js = agent.jobs[key]
            agent.jobs[key] = state(js.job.job_id, js.iterations_done, finished=True)
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
    assert held(coord) == {"a": 2, "b": 0}


def test_a_new_epochs_full_update_replaces_the_state_and_an_old_epochs_delta_is_a_gap() -> None:
    old, coord = Agent(), AgentState("h1")
    old.jobs["C", "a"] = state("a", 3)
    coord.apply(old.full(), HOSTS)
    new = Agent()
    new.source.epoch = 6  # the agent restarted
    assert coord.apply(new.full(), HOSTS)[0] == "applied" and held(coord) == {}
    old.jobs["C", "a"] = state("a", 4)
    assert coord.apply(old.delta(), HOSTS)[0] == "gap"
