"""Model -> per-host plans keyed by flow id (pure): ``pda.planning.Planner``, the
planner the simulator calls, with the bands keyed by the agents' flow ids."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from common.flows import inbound_key, parse_port_flow
from coordinator.snapshot import Model
from pda.planning import Planner
from pda.snapshot import FlowTables, build_snapshot

# flow id -> (band, dscp) of the flows a host sends, and inbound_key -> the control
# (band, dscp) for the port-matched flows it receives (its ACKs and handshakes on them)
HostPlan = dict[str, tuple[int, int]]


@dataclass
class Planned:
    plans: dict[str, HostPlan]
    order: list[str]
    stages: int


def plan_hosts(
    model: Model, planner: Planner, now: float, tables: FlowTables | None = None
) -> Planned:
    snap = build_snapshot(model.cojobs, model.hosts, known_survivors=False, tables=tables)
    pr = planner.plan(snap, now)
    queues = planner.queues
    plans: dict[str, HostPlan] = {h: {} for h in model.hosts}
    remote = np.flatnonzero(snap.flow_src != snap.flow_dst).tolist()
    bands, dscps = pr.band.tolist(), pr.dscp.tolist()
    src, ids = model.flow_src, model.flow_ids
    ctl_band = queues.reserved[0] if queues.reserved else 0
    ctl = (ctl_band, queues.dscp_table[ctl_band])
    for i in remote:
        plans[src[i]][ids[i]] = (bands[i], dscps[i])
        inbound = _inbound(ids[i], src[i])
        if inbound is not None and inbound[0] in plans:
            plans[inbound[0]][inbound[1]] = ctl
    return Planned(plans, pr.order, len(snap.stage_ids))


@lru_cache(maxsize=1 << 18)
def _inbound(fid: str, src: str) -> tuple[str, str] | None:
    """(receiving host, its inbound key) of a port-matched flow id; None for host flows."""
    parsed = parse_port_flow(fid)
    if parsed is None:
        return None
    dst, port, by_source = parsed
    return dst, inbound_key(src, port, by_source)
