"""One planning function for the coordinator and the simulator.

``Planner.plan`` turns a snapshot into the band (sender NIC), receiver-side band and
DSCP of every snapshot flow, with the policy's order. It orders afresh (PDA for grouper)
on the first plan and once ``period`` has passed since the last fresh order; plans in
between (on events: a stage started or ended, a cojob arrived) keep the last order, and
units that arrived since are appended at its end, where ``pda/priorities.py`` gives
them a free band or treats them as overflow (DESIGN.md steps 2-4). ``period`` 0 orders
afresh every time (the simulator's idealised scheduler). The coordinator calls it
every cycle with the wall clock, the simulator at every event with simulated time, so
what we simulate is what we deploy, for every period.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from grouper.common.queues import QueueConfig
from grouper.pda.policies import flow_priorities, schedule
from grouper.pda.snapshot import Snapshot


@dataclass
class FlowPlan:
    """Per snapshot flow row: ``band`` on the sender's NIC, ``recv_band`` (the band
    behind the DSCP) and ``dscp``; ``order`` is the policy's unit order in force."""

    order: list[str]
    fresh: bool
    band: np.ndarray
    recv_band: np.ndarray
    dscp: np.ndarray
    order_seconds: float = 0.0  # ordering (PDA or the policy's), wall clock
    map_seconds: float = 0.0  # the order -> bands and DSCPs of every flow row


class Planner:
    def __init__(
        self, policy: str, queues: QueueConfig, period: float, *, unlimited: bool = False
    ) -> None:
        self.policy = policy
        self.queues = queues
        self.period = period
        self.unlimited = unlimited
        self.order: list[str] | None = None
        self.last_fresh = -math.inf

    @property
    def next_fresh(self) -> float:
        """When the next plan orders afresh (-inf before the first plan: it always does)."""
        return self.last_fresh + self.period if self.order is not None else -math.inf

    def plan(self, snap: Snapshot, now: float) -> FlowPlan:
        fresh = self.order is None or self.period <= 0 or now >= self.next_fresh - 1e-9
        t0 = time.perf_counter()
        sched = schedule(snap, self.policy, None if fresh else self.order)
        t1 = time.perf_counter()
        fp = flow_priorities(snap, sched, self.queues, unlimited=self.unlimited)
        t2 = time.perf_counter()
        order = sched.ordered_ids()
        if fresh:
            self.order, self.last_fresh = order, now
        recv = fp.recv_band if fp.recv_band is not None else fp.band
        return FlowPlan(order, fresh, fp.band, recv, fp.dscp, t1 - t0, t2 - t1)
