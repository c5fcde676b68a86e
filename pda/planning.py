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
from grouper.pda.order import completion_costs, pda_weights
from grouper.pda.policies import Schedule, flow_priorities, schedule
from grouper.pda.snapshot import Snapshot

STEADY_POLICIES = ("grouper", "grouper-offline")  # the orders ``keep_within`` may keep


@dataclass
class FlowPlan:
    """Per snapshot flow row: ``band`` on the sender's NIC, ``recv_band`` (the band
    behind the DSCP) and ``dscp``; ``order`` is the policy's unit order in force."""

    order: list[str]
    fresh: bool  # ordered afresh (else the last fresh order, new units at its end)
    band: np.ndarray
    recv_band: np.ndarray
    dscp: np.ndarray
    order_seconds: float = 0.0  # ordering (PDA or the policy's), wall clock
    map_seconds: float = 0.0  # the order -> bands and DSCPs of every flow row
    kept: bool = False  # a fresh order that kept the last one's (``keep_within``)


class Planner:
    def __init__(
        self, policy: str, queues: QueueConfig, period: float, *, unlimited: bool = False,
        keep_within: float = 0.0,
    ) -> None:  # fmt: skip
        self.policy = policy
        self.queues = queues
        self.period = period
        self.unlimited = unlimited
        # a fresh order keeps the known stages' last relative order when that costs at
        # most this share more than PDA's new order (0: always PDA's; see ``_steady``)
        self.keep_within = keep_within
        self.kept = 0  # fresh orders that kept the last one
        self.order: list[str] | None = None
        self.rows: tuple[list[str], np.ndarray] | None = None  # the last fresh order's ids, rows
        self.last_fresh = -math.inf

    @property
    def next_fresh(self) -> float:
        """When the next plan orders afresh (-inf before the first plan: it always does)."""
        return self.last_fresh + self.period if self.order is not None else -math.inf

    def plan(self, snap: Snapshot, now: float) -> FlowPlan:
        fresh = self.order is None or self.period <= 0 or now >= self.next_fresh - 1e-9
        t0 = time.perf_counter()
        sched = schedule(snap, self.policy, None if fresh else self.order)
        kept = fresh and self.keep_within > 0 and self._steady(snap, sched)
        t1 = time.perf_counter()
        fp = flow_priorities(snap, sched, self.queues, unlimited=self.unlimited)
        t2 = time.perf_counter()
        if kept and self.rows is not None and sched.order is self.rows[1]:
            order = self.order  # the very rows and order of the last one: its ids
        else:
            order = sched.ordered_ids()
        if fresh:
            self.order, self.last_fresh = order, now
            self.rows = (sched.unit_ids, sched.order)
            self.kept += kept
        recv = fp.recv_band if fp.recv_band is not None else fp.band
        return FlowPlan(order, fresh, fp.band, recv, fp.dscp, t1 - t0, t2 - t1, kept)

    def _steady(self, snap: Snapshot, sched: Schedule) -> bool:
        """The known stages in their last relative order, in the slots PDA's new order
        gives known stages (new cojobs' stages stay where PDA puts them), when that
        order's weighted completion bound is within ``keep_within`` of the new one's:
        a few stages progressing then leave the bands where they are (issue #31).
        Whether it did; an order with no unit of the last one keeps nothing."""
        if self.policy not in STEADY_POLICIES or len(sched.order) == 0 or self.order is None:
            return False
        if self.rows is not None and self.rows[0] == sched.unit_ids:
            kept = self.rows[1]  # the same units in the same rows: the last order is all known
        else:
            kept = keep_known(sched, self.order)
            if kept is None or not _chains_kept(kept, snap.stage_prev):
                return False  # none known, or a known cojob's stage put before one kept later
        old, new = completion_costs(sched.loads, pda_weights(snap), [kept, sched.order])
        if old > (1.0 + self.keep_within) * new:
            return False
        sched.order = kept
        return True


def _chains_kept(order: np.ndarray, prev: np.ndarray) -> bool:
    """Whether every stage comes after its chain predecessor in ``order``."""
    pos = np.empty(len(order), dtype=np.int64)
    pos[order] = np.arange(len(order))
    has = np.flatnonzero(prev >= 0)
    return bool((pos[prev[has]] < pos[has]).all())


def keep_known(sched: Schedule, last: list[str]) -> np.ndarray | None:
    """``sched``'s order with the units of ``last`` put back in their relative order
    there, in the positions the order gives them; the other units keep theirs. None
    when no unit of ``last`` is in ``sched``."""
    rank = {u: i for i, u in enumerate(last)}
    ids = sched.unit_ids
    order = np.asarray(sched.order, dtype=np.int64)
    known = np.fromiter((ids[r] in rank for r in order.tolist()), bool, len(order))
    rows = order[known]
    if len(rows) == 0:
        return None
    was = np.fromiter((rank[ids[r]] for r in rows.tolist()), np.int64, len(rows))
    out = order.copy()
    out[known] = rows[np.argsort(was, kind="stable")]
    return out
