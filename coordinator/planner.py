"""Model -> per-host plans keyed by flow id (pure): ``pda.planning.Planner``, the
planner the simulator calls, with the bands keyed by the agents' flow ids."""

from __future__ import annotations

import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from grouper.common.queues import QueueConfig
from grouper.coordinator.snapshot import Model
from grouper.pda.planning import Planner
from grouper.pda.snapshot import FlowTables, build_snapshot

# flow id -> (band, dscp) of the flows a host sends, and inbound_key -> the control
# (band, dscp) for the port-matched flows it receives (its ACKs and handshakes on them)
HostPlan = dict[str, tuple[int, int]]
# a patched host plan's origin: the plan it was copied from, and the keys set since
# (nothing is removed by a patch), so its delta need not compare the two plans
PlanPatch = tuple[HostPlan, list[str]]


@dataclass
class Planned:
    plans: dict[str, HostPlan]
    order: list[str]
    stages: int
    # what the plans were made from, for patching the next ones (``plan_hosts(last=)``)
    rows: list[str] | None = None  # the model's flow id list (the very object)
    hosts: tuple[str, ...] | None = None
    band: np.ndarray | None = None
    dscp: np.ndarray | None = None
    # wall seconds of the steps: the snapshot (gathering the model into arrays), the
    # order (PDA or the policy's), and mapping (bands, DSCPs and the host plans)
    snapshot_s: float = 0.0
    order_s: float = 0.0
    map_s: float = 0.0
    patched: dict[str, PlanPatch] = field(default_factory=dict)  # hosts whose plan was patched
    fresh: bool = False  # ordered afresh this time
    kept: bool = False  # afresh, and the last order kept (``Planner.keep_within``)


def plan_hosts(
    model: Model,
    planner: Planner,
    now: float,
    tables: FlowTables | None = None,
    last: Planned | None = None,
) -> Planned:
    """Every host's plan. With ``last`` (the plans made from a model with the very same
    flow rows: only progress moved), only the rows whose band or DSCP changed are patched
    into copies of its plans; the other hosts keep their plan objects."""
    t0 = time.perf_counter()
    snap = build_snapshot(model.cojobs, model.hosts, known_survivors=False, tables=tables,
                          job_done=model.job_done)  # fmt: skip
    t1 = time.perf_counter()
    pr = planner.plan(snap, now)
    t2 = time.perf_counter()
    band, dscp = pr.band, pr.dscp
    patched: dict[str, PlanPatch] = {}
    if last is not None and last.rows is model.flow_ids and last.hosts is model.hosts:
        plans = _patch(model, snap.flow_src, snap.flow_dst, band, dscp, last, patched)
    else:
        plans = _assemble(model, snap.flow_src, snap.flow_dst, band, dscp, planner.queues)
    host_s = time.perf_counter() - t2
    return Planned(plans, pr.order, len(snap.stage_ids), model.flow_ids, model.hosts, band, dscp,
                   t1 - t0, pr.order_seconds, pr.map_seconds + host_s, patched, pr.fresh,
                   pr.kept)  # fmt: skip


def _assemble(model: Model, src: np.ndarray, dst_host: np.ndarray, band: np.ndarray,
              dscp: np.ndarray, queues: QueueConfig) -> dict[str, HostPlan]:  # fmt: skip
    ctl_band = queues.reserved[0] if queues.reserved else 0
    ctl = (ctl_band, queues.dscp_table[ctl_band])
    host_names = model.hosts
    plans: dict[str, HostPlan] = {h: {} for h in host_names}
    # flows grouped by sending host, then each host's dict built in one C-level call;
    # the same for the inbound keys of port-matched flows, grouped by receiving host
    remote = np.flatnonzero(src != dst_host)
    values = list(zip(band.tolist(), dscp.tolist(), strict=True))
    for host, rows in _groups(src[remote], remote, len(host_names)):
        pick = _picker(rows)
        plans[host_names[host]] = dict(zip(pick(model.flow_ids), pick(values), strict=True))
    dst = np.asarray(model.flow_inbound_dst, dtype=np.int64)[remote]
    has = np.flatnonzero(dst >= 0)
    for host, rows in _groups(dst[has], remote[has], len(host_names)):
        plans[host_names[host]].update(dict.fromkeys(_picker(rows)(model.flow_inbound_key), ctl))
    return plans


def _patch(model: Model, src: np.ndarray, dst_host: np.ndarray, band: np.ndarray,
           dscp: np.ndarray, last: Planned,
           patched: dict[str, PlanPatch]) -> dict[str, HostPlan]:  # fmt: skip
    """``last``'s plans with the rows whose (band, DSCP) changed since: a host with such
    rows gets a patched copy (the old plan may be what its agent acknowledged), recorded
    in ``patched`` with the keys set; the others keep their plan. Inbound entries depend
    on the rows only: unchanged."""
    moved = (band != last.band) | (dscp != last.dscp)
    rows = np.flatnonzero(moved & (src != dst_host))
    plans = dict(last.plans)
    host_names = model.hosts
    ids = model.flow_ids
    for host, picked in _groups(src[rows], rows, len(host_names)):
        name = host_names[host]
        keys = [ids[r] for r in picked]
        plan = dict(plans[name])
        bd = zip(band[picked].tolist(), dscp[picked].tolist(), strict=True)
        plan.update(zip(keys, bd, strict=True))
        patched[name] = (plans[name], keys)
        plans[name] = plan
    return plans


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
