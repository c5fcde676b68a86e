"""Plans to agents, and what each agent is known to hold.

Two ways to deliver, on the Session stream each agent keeps open:

- **acknowledged** (``ack_by_update`` off): every plan is answered by an
  ``ApplyResult`` that the push waits for, one round trip per host (the way it was);
  the trace (``--trace``) needs it, since the result carries the agent's stamps.
- **acknowledged by the next update** (on, the default): the plan is written and the
  push goes on; the agent answers only a plan it did not apply (refused, or a delta on
  a base it does not hold: ``need_full``). An applied plan is acknowledged by the
  ``plan_version`` of the agent's next ``StateUpdate``, which it sends within one
  progress interval (a quarter period), and which it sends anyway when its jobs
  progress.

:class:`PlanTrack` (pure) keeps one agent's side of this: the plan last sent and its
version, what the agent confirmed, and when a plan must go whole. Every rule that
keeps today's guarantees is here: versions grow per agent (``next_version``); a delta
names its base and the agent refuses one on any other (so a lost or late plan never
patches the wrong one); a plan not confirmed ``repair_after`` seconds after it went
is sent again whole; an agent that reports another version than the one sent after
a new full update gets the plan whole. The agent refuses any version not above the
one in force, so a late or repeated message never replaces a newer plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from grouper.coordinator.plan_msg import plan_request
from grouper.coordinator.planner import HostPlan, PlanPatch
from grouper.v1 import agent_pb2 as pb


@dataclass
class PlanTrack:
    agent_version: int = 0  # the version the agent last said is in force
    pushed_version: int = 0  # the last version sent
    sent: HostPlan | None = None  # the plan sent as ``pushed_version``
    sent_at: float = -math.inf
    acked: HostPlan | None = None  # the last plan the agent confirmed holding
    last_push: float = -math.inf
    whole_next: bool = False  # the next plan goes whole
    whole_version: int = 0  # the last version sent whole

    def next_version(self) -> int:
        return max(self.agent_version, self.pushed_version) + 1

    @property
    def confirmed(self) -> bool:
        """The agent said it holds the last plan sent."""
        return self.sent is not None and self.agent_version == self.pushed_version

    def needs_push(self, plan: HostPlan, now: float, keepalive: float, repair_after: float) -> bool:
        """``plan`` is the host's plan now: send it when it is not what went last, when
        what went was not confirmed in ``repair_after`` (then whole), when the agent
        needs it whole, and at least every ``keepalive``."""
        if self.whole_next or self.sent is None:
            return True
        if plan is not self.sent and plan != self.sent:
            return True
        if self.agent_version != self.pushed_version and now - self.sent_at >= repair_after:
            self.whole_next = True  # lost, or the agent lost its plan: repair
            return True
        return now - self.last_push > keepalive

    def message(
        self, host: str, plan: HostPlan, now: float, quiet: bool, patch: PlanPatch | None = None
    ) -> pb.SessionRequest:
        """The next plan message (whole, or a delta on the plan sent last), recorded as
        sent. ``patch``: where ``plan`` came from; when that is the plan sent last, the
        delta is the keys the patch set."""
        version = self.next_version()
        whole = self.whole_next or self.sent is None
        if not quiet and not self.confirmed:
            whole = True  # waiting for results: a delta goes on a confirmed base only
        changed = patch[1] if patch is not None and patch[0] is self.sent else None
        msg = plan_request(
            host, version, plan, None if whole else self.sent, 0 if whole else self.pushed_version,
            changed,
        )  # fmt: skip
        msg.plan.ack_by_update = quiet
        self.pushed_version, self.sent, self.sent_at, self.last_push = version, plan, now, now
        if whole:
            self.whole_next, self.whole_version = False, version
        return msg

    def on_report(self, version: int, full: bool) -> None:
        """An agent's update said ``version`` is in force (``full``: after a (re)sync)."""
        self.agent_version = version
        if version == self.pushed_version and self.sent is not None:
            self.acked = self.sent
        elif full and version != self.pushed_version:
            self.whole_next = True  # restarted, or it dropped or missed our plans

    def on_result(self, res: pb.ApplyResult) -> str:
        """A result: "ok" (applied, or nothing to do), "whole" (send the plan whole now)
        or "refused" (the agent refused the plan itself: error logged, whole next)."""
        if res.answers and res.answers < self.whole_version and not res.applied:
            return "ok"  # about a plan that a whole one has replaced since
        self.agent_version = res.version
        if res.applied or res.version >= self.pushed_version:
            if res.version == self.pushed_version and self.sent is not None:
                self.acked = self.sent
            return "ok"  # applied, or a late copy refused: the agent holds our newest
        self.whole_next = True
        return "whole" if res.need_full else "refused"

    def restart(self) -> None:
        """Forget what was sent (a config reload rebuilds the plans)."""
        self.sent = self.acked = None
