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
    host_names = model.hosts
    plans: dict[str, HostPlan] = {h: {} for h in host_names}
    # flows grouped by sending host, then each host's dict built in one C-level call;
    # the same for the inbound keys of port-matched flows, grouped by receiving host
    remote = np.flatnonzero(snap.flow_src != snap.flow_dst)
    values = list(zip(pr.band.tolist(), pr.dscp.tolist(), strict=True))
    for host, rows in _groups(snap.flow_src[remote], remote, len(model.hosts)):
        pick = _picker(rows)
        plans[host_names[host]] = dict(zip(pick(model.flow_ids), pick(values), strict=True))
    dst = np.asarray(model.flow_inbound_dst, dtype=np.int64)[remote]
    has = np.flatnonzero(dst >= 0)
    for host, rows in _groups(dst[has], remote[has], len(model.hosts)):
        plans[host_names[host]].update(dict.fromkeys(_picker(rows)(model.flow_inbound_key), ctl))
    return Planned(plans, pr.order, len(snap.stage_ids))


def _groups(key: np.ndarray, rows: np.ndarray, n: int) -> list[tuple[int, list[int]]]:
    """(k, the ``rows`` whose ``key`` is k) for each k in range(n) that has any."""
    order = np.argsort(key, kind="stable")
    cuts = np.searchsorted(key[order], np.arange(n + 1))
    by_key = rows[order]
    return [(k, by_key[cuts[k] : cuts[k + 1]].tolist()) for k in np.flatnonzero(np.diff(cuts))]


def _picker(rows: list[int]) -> Callable[[list], tuple]:
    """Items at ``rows`` of a list, as a tuple (``itemgetter`` gives a bare item for one)."""
    if len(rows) == 1:
        r = rows[0]
        return lambda xs: (xs[r],)
    return operator.itemgetter(*rows)
