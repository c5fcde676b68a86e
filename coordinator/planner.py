"""Model -> per-host plans keyed by flow id (pure). The same pda/ calls as the simulator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from coordinator.snapshot import Model
from pda.policies import flow_priorities, schedule
from pda.priorities import QueueConfig
from pda.snapshot import FlowTables, build_snapshot

HostPlan = dict[str, tuple[int, int]]  # flow id -> (band, dscp)


@dataclass
class Planned:
    plans: dict[str, HostPlan]
    order: list[str]
    stages: int


def plan_hosts(
    model: Model, policy: str, queues: QueueConfig, tables: FlowTables | None = None
) -> Planned:
    snap = build_snapshot(model.cojobs, model.hosts, known_survivors=False, tables=tables)
    sched = schedule(snap, policy)
    pr = flow_priorities(snap, sched, queues)
    plans: dict[str, HostPlan] = {h: {} for h in model.hosts}
    remote = np.flatnonzero(snap.flow_src != snap.flow_dst).tolist()
    bands, dscps = pr.band.tolist(), pr.dscp.tolist()
    src, ids = model.flow_src, model.flow_ids
    for i in remote:
        plans[src[i]][ids[i]] = (bands[i], dscps[i])
    return Planned(plans, sched.ordered_ids(), len(snap.stage_ids))
