"""Every policy's order, computed from the same snapshot.

* ``fs``: no order; every flow stays in the default band (per-flow fair share).
* ``baraat``: FIFO by stage arrival (stage start time, then cojob, then stage number);
  weights play no part.
* ``sincronia``: primal-dual (same core as PDA) over each job's current-iteration
  coflow, weighted by the jobs' weights (1 unless given), no stage chains:
  stage-agnostic.
* ``sptf``: shortest remaining job data first (jobs by bytes left to send over their
  weight), knowing each job's true size (clairvoyant, as SRPT-style baselines are).
* ``grouper`` / ``grouper-offline``: PDA over stages, a stage's weight Algorithm 1's
  times the largest weight of its jobs. They differ only in the snapshot: online
  assumes every job runs all remaining stages, offline knows which jobs die (build it
  with ``known_survivors=True``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.common.scheduling import POLICIES
from grouper.pda.order import pda_order, primal_dual_order
from grouper.pda.priorities import FlowPriorities, map_priorities
from grouper.pda.snapshot import Snapshot


def knows_survivors(policy: str) -> bool:
    """Whether the policy may see which jobs die: the offline oracle, and ``sptf``,
    which like every SRPT-style scheduler is clairvoyant about job sizes (the paper's
    Fig. 3(c) orders job 2 (1 unit) and job 4 (2 units) first because it knows them)."""
    return policy in ("grouper-offline", "sptf")


def orders_flows(policy: str) -> bool:
    """Whether the policy's plan depends on progress at all: ``fs`` leaves every flow
    in the default band whatever the state, so its plan changes only with the flows."""
    return policy != "fs"


@dataclass
class Schedule:
    """The units a policy orders (stages or jobs), their loads and their order."""

    policy: str
    unit_kind: str  # "stage" or "job"
    unit_ids: list[str]
    loads: sparse.csr_matrix
    order: np.ndarray  # unit rows, highest priority first; empty for fs
    flow_unit: np.ndarray  # unit row of every snapshot flow, -1 if none

    def ordered_ids(self) -> list[str]:
        return [self.unit_ids[i] for i in self.order]


def schedule(snap: Snapshot, policy: str, previous: list[str] | None = None) -> Schedule:
    """The policy's order; with ``previous`` (unit ids of the last order) no new order
    is computed: known units keep their previous order and units that arrived since
    are appended at its end (``pda/priorities.py`` says what bands they then get)."""
    sched = _units(snap, policy)
    if sched.unit_kind == "none":
        return sched
    if previous is None:
        sched.order = _order(snap, sched)
        return sched
    index = {u: i for i, u in enumerate(sched.unit_ids)}
    known = [index[u] for u in previous if u in index]
    seen = set(known)
    late = [i for i in range(len(sched.unit_ids)) if i not in seen]
    sched.order = np.asarray(known + late, dtype=np.int64)
    return sched


def _units(snap: Snapshot, policy: str) -> Schedule:
    """The units a policy orders, with an empty order."""
    if policy not in POLICIES:
        raise ConfigError("policy", f"must be one of {', '.join(POLICIES)}; got {policy!r}")
    empty = np.zeros(0, np.int64)
    if policy in ("grouper", "grouper-offline", "baraat"):
        stage_of_flow = snap.job_stage[snap.flow_job] if len(snap.flow_job) else snap.flow_job
        return Schedule(policy, "stage", snap.stage_ids, snap.stage_loads, empty, stage_of_flow)
    if policy in ("sincronia", "sptf"):
        active = snap.job_stage >= 0
        fu = (
            np.where(active[snap.flow_job], snap.flow_job, -1)
            if len(snap.flow_job)
            else snap.flow_job
        )
        loads = snap.job_iter_loads.multiply(active[:, None]).tocsr()
        return Schedule(policy, "job", snap.job_ids, loads, empty, fu)
    # fs: nothing is ordered
    return Schedule(
        policy,
        "none",
        [],
        sparse.csr_matrix((0, snap.num_ports)),
        empty,
        np.full(len(snap.flow_job), -1),
    )


def _order(snap: Snapshot, sched: Schedule) -> np.ndarray:
    policy = sched.policy
    if policy in ("grouper", "grouper-offline"):
        return pda_order(snap).order
    if policy == "baraat":
        return np.lexsort((snap.stage_number, snap.stage_cojob, snap.stage_started))
    rows = np.flatnonzero(snap.job_stage >= 0)
    if policy == "sincronia":
        weights = snap.job_weight[rows]
        sub = primal_dual_order(sched.loads[rows], weights, tie_key=rows.astype(float))
        return rows[sub.order]
    # sptf: weighted shortest remaining first (Smith's rule)
    return rows[np.argsort(snap.job_remaining[rows] / snap.job_weight[rows], kind="stable")]


def flow_priorities(
    snap: Snapshot, sched: Schedule, cfg: QueueConfig, *, unlimited: bool = False
) -> FlowPriorities:
    if sched.unit_kind == "none":
        n = len(snap.flow_job)
        band = np.full(n, cfg.default_band, dtype=np.int64)
        return FlowPriorities(band, np.asarray(cfg.dscp_table)[band], sched.flow_unit, band)
    return map_priorities(
        sched.loads,
        sched.order,
        sched.flow_unit,
        snap.flow_src,
        snap.flow_dst,
        len(snap.hosts),
        cfg,
        unlimited=unlimited,
    )


def host_plans(snap: Snapshot, sched: Schedule, cfg: QueueConfig) -> dict[str, dict]:
    """Per-host plan: every flow sent from the host with its band and DSCP, and the
    order of the units sending from / receiving at the host."""
    pr = flow_priorities(snap, sched, cfg)
    plans: dict[str, dict] = {
        h: {"flows": [], "send_order": [], "receive_order": []} for h in snap.hosts
    }
    for i in range(len(snap.flow_job)):
        s, d = int(snap.flow_src[i]), int(snap.flow_dst[i])
        if s == d:
            continue
        job = snap.job_ids[snap.flow_job[i]]
        cojob, job_id = job.split(":", 1)
        stage = int(snap.job_stage[snap.flow_job[i]])
        plans[snap.hosts[s]]["flows"].append(
            {
                "cojob": cojob,
                "job": job_id,
                "stage": snap.stage_ids[stage] if stage >= 0 else None,
                "src": snap.hosts[s],
                "dst": snap.hosts[d],
                "band": int(pr.band[i]),
                "dscp": int(pr.dscp[i]),
            }
        )
    if len(sched.order):
        nh = len(snap.hosts)
        csc = sched.loads.tocsc()
        position = np.empty(len(sched.unit_ids), dtype=np.int64)
        position[sched.order] = np.arange(len(sched.order))
        for h, host in enumerate(snap.hosts):
            for key, port in (("send_order", h), ("receive_order", nh + h)):
                rows = csc.indices[csc.indptr[port] : csc.indptr[port + 1]]
                rows = rows[np.argsort(position[rows])]
                plans[host][key] = [sched.unit_ids[r] for r in rows]
    return plans
