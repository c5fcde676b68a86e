"""Plans acknowledged by the agents' next update (``coordinator.delivery``): whatever a
channel does to plans, results, updates and syncs (lose, repeat, hold back and deliver
out of order), once it stops losing, the agent holds the newest plan within two periods,
and never applies a plan older than the one in force.

The coordinator's side is the real one (``PlanTrack``, ``plan_request`` through it, and
``AgentState`` for the numbered updates); the agent's is the rule the real agent applies
(``agent.plan.patch_plan`` on the plan in force, then the version must grow), with the
real update loop's timing: an update when its version in force changed, when a sync
asked for a full one, and as a heartbeat."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.agent.plan import patch_plan
from grouper.agent.service import plan_dict
from grouper.common.errors import ConfigError
from grouper.coordinator.delivery import PlanTrack
from grouper.coordinator.state import AgentState
from grouper.v1 import agent_pb2 as pb

TICK = 0.25  # the agents' progress interval: a quarter period
PERIOD = 1.0
REPAIR = 2 * TICK  # what the coordinator uses (``Coordinator._repair_after``)
HEARTBEAT = 8  # ticks
FLOWS = [f"c{i}/j/h{i % 3}:{5200 + i}" for i in range(6)]

plans = st.dictionaries(
    st.sampled_from(FLOWS), st.tuples(st.integers(1, 6), st.sampled_from([0, 16, 24, 32])),
    max_size=6,
)  # fmt: skip


@dataclass
class Agent:
    version: int = 0
    plan: dict | None = None
    seq: int = 0
    sent_version: int = 0  # the version its last update carried
    want_full: bool = True  # a sync came (the session opens with one)
    since: int = 0  # ticks since its last update
    applied: list[int] = field(default_factory=list)

    def receive(self, msg: pb.SessionRequest) -> pb.SessionReply | None:
        if msg.HasField("sync"):
            self.want_full = True
            return None
        p = msg.plan
        whole = plan_dict(p)
        if p.base_version:
            try:
                whole = patch_plan(self.plan, self.version, whole)
            except ConfigError as exc:
                return _result(False, self.version, p.version, str(exc), need_full=True)
        if p.version <= self.version:
            return _result(False, self.version, p.version, "plan.version: stale")
        assert not self.applied or p.version > self.applied[-1], "an older plan over a newer"
        self.version, self.plan = p.version, whole
        self.applied.append(p.version)
        return None if p.ack_by_update else _result(True, p.version, p.version, "")

    def tick(self) -> pb.SessionReply | None:
        self.since += 1
        if not (self.want_full or self.version != self.sent_version or self.since >= HEARTBEAT):
            return None
        self.seq += 1
        up = pb.StateUpdate(host="a", epoch=7, seq=self.seq, full=self.want_full,
                            plan_version=self.version)  # fmt: skip
        self.want_full, self.sent_version, self.since = False, self.version, 0
        return pb.SessionReply(update=up)

    def holds(self) -> dict:
        flows = (self.plan or {}).get("flows", [])
        return {f["flow_id"]: (f["band"], f["dscp"]) for f in flows}


def _result(applied: bool, version: int, answers: int, error: str, need_full: bool = False):
    res = pb.ApplyResult(applied=applied, version=version, answers=answers, error=error,
                         need_full=need_full)  # fmt: skip
    return pb.SessionReply(result=res)


class Coordinator:
    """One agent's link: the real bookkeeping, driven as ``coordinator.loop`` does."""

    def __init__(self) -> None:
        self.track = PlanTrack()
        self.state = AgentState("a")
        self.plan: dict = {}
        self.up = False  # its first full update came (then it stays up: no timeouts here)

    def cycle(self, now: float) -> list[pb.SessionRequest]:
        if not self.up or not self.track.needs_push(self.plan, now, 1e9, REPAIR):
            return []
        return [self.track.message("a", self.plan, now, quiet=True)]

    def receive(self, reply: pb.SessionReply, now: float) -> list[pb.SessionRequest]:
        if reply.HasField("result"):  # ``Pusher.on_result``: a refused delta goes whole
            if self.track.on_result(reply.result) == "whole" and self.track.sent is not None:
                return [self.track.message("a", self.track.sent, now, quiet=True)]
            return []
        verdict, _ = self.state.apply(reply.update, {"a"})
        if verdict == "applied":
            self.up = True
            self.track.on_report(self.state.plan_version, reply.update.full)
        if self.state.awaiting_full:  # a gap, or still no full update: ask (again)
            return [pb.SessionRequest(sync=pb.SyncRequest(interval=TICK))]
        return []


class Channel:
    """Messages in flight both ways; while ``lossy``, each is lost, delivered, repeated
    or held back (to come later, out of order), as hypothesis draws."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.held: list[tuple[str, object]] = []

    def carry(self, sent: list[tuple[str, object]], lossy: bool) -> list[tuple[str, object]]:
        out: list[tuple[str, object]] = []
        if lossy:
            for m in sent:
                fate = self.data.draw(st.sampled_from(["deliver", "lose", "repeat", "hold"]))
                if fate in ("deliver", "repeat"):
                    out.append(m)
                if fate in ("repeat", "hold"):
                    self.held.append(m)
        else:
            out.extend(sent)
        # held messages come back at any later time, in any order, lossy or not
        late = [m for m in self.held if self.data.draw(st.booleans())]
        for m in late:
            self.held.remove(m)
        out.extend(late)
        return self.data.draw(st.permutations(out)) if lossy or late else out


@settings(max_examples=300, deadline=None)
@given(data=st.data(), lossy_periods=st.integers(0, 5), first=plans)
def test_any_losses_leave_the_agent_at_the_newest_plan_within_two_periods(
    data: st.DataObject, lossy_periods: int, first: dict
) -> None:
    agent, coord, chan = Agent(), Coordinator(), Channel(data)
    coord.plan = first
    coord.receive(agent.tick(), 0.0)  # the session opened: the agent's full update came
    to_agent: list[tuple[str, object]] = []
    to_coord: list[tuple[str, object]] = []
    ticks_per_period = round(PERIOD / TICK)
    heal = lossy_periods * ticks_per_period
    for t in range(heal + 2 * ticks_per_period):
        now = t * TICK
        lossy = t < heal
        if t % ticks_per_period == 0:
            if lossy and data.draw(st.booleans()):
                coord.plan = data.draw(plans)  # the plans change while messages get lost
            to_agent += [("c", m) for m in coord.cycle(now)]
        up = agent.tick()
        if up is not None:
            to_coord.append(("a", up))
        # deliver both ways until nothing is left this tick (answers go at once)
        while to_agent or to_coord:
            batch = chan.carry(to_agent + to_coord, lossy)
            to_agent, to_coord = [], []
            for who, m in batch:
                if who == "c":
                    reply = agent.receive(m)
                    if reply is not None:
                        to_coord.append(("a", reply))
                else:
                    to_agent += [("c", r) for r in coord.receive(m, now)]
    assert agent.holds() == coord.plan, (agent.applied, coord.track)
    assert agent.version == coord.track.pushed_version
    assert agent.applied == sorted(set(agent.applied))  # never an older plan over a newer
