"""Model -> per-host plans keyed by flow id (pure): ``pda.planning.Planner``, the
planner the simulator calls, with the bands keyed by the agents' flow ids."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

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
    ctl_band = queues.reserved[0] if queues.reserved else 0
    ctl = (ctl_band, queues.dscp_table[ctl_band])
    plans: dict[str, HostPlan] = {h: {} for h in model.hosts}
    # flows grouped by sending host, then each host's dict built in one C-level call
    remote = np.flatnonzero(snap.flow_src != snap.flow_dst)
    by_src = remote[np.argsort(snap.flow_src[remote], kind="stable")]
    cuts = np.searchsorted(snap.flow_src[by_src], np.arange(len(model.hosts) + 1))
    values = list(zip(pr.band.tolist(), pr.dscp.tolist(), strict=True))
    inbound: dict[str, list[str]] = {}
    for h, host in enumerate(model.hosts):
        rows = by_src[cuts[h] : cuts[h + 1]].tolist()
        if not rows:
            continue
        pick = _picker(rows)
        plans[host] = dict(zip(pick(model.flow_ids), pick(values), strict=True))
        for entry in pick(model.flow_inbound):
            if entry is not None:
                inbound.setdefault(entry[0], []).append(entry[1])
    for dst, keys in inbound.items():
        if dst in plans:
            plans[dst].update(dict.fromkeys(keys, ctl))
    return Planned(plans, pr.order, len(snap.stage_ids))


def _picker(rows: list[int]) -> Callable[[list], tuple]:
    """Items at ``rows`` of a list, as a tuple (``itemgetter`` gives a bare item for one)."""
    if len(rows) == 1:
        r = rows[0]
        return lambda xs: (xs[r],)
    return operator.itemgetter(*rows)
