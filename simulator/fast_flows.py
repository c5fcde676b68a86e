"""The fast path for coflow-shaped workloads with the contention penalty on.

:class:`grouper.simulator.fast.FastEngine` runs coflow-shaped workloads on ideal links
(no contention penalty: every coflow trace); with the penalty on (Wang et al., Eq. 5) a
queue's efficiency depends on how many coflows share it, so rates are not the same per
class of flows and this engine, the fast path before #32's rewrite, gives them flow by
flow through ``allocate_settled``.
"""

from __future__ import annotations

import math

import numpy as np

from grouper.pda.model import Cojob
from grouper.pda.planning import Planner
from grouper.pda.policies import knows_survivors
from grouper.pda.priorities import QueueConfig
from grouper.pda.snapshot import FlowTables, build_snapshot
from grouper.simulator.allocator import Allocation, allocate_settled
from grouper.simulator.coflow_loop import CoflowLoop
from grouper.simulator.fast_state import EPS
from grouper.simulator.limits import RunLimits
from grouper.workloads.topology import Topology

# a flow of each: uplink, downlink, band, receiver band, task
Flows = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


class FlowFastEngine(CoflowLoop):
    """The engine's semantics on coflow-shaped workloads (:func:`coflow_shaped`), flows
    in flat arrays, rates through ``allocate_settled`` (used with the contention penalty on)."""

    def __init__(
        self,
        cojobs: list[Cojob],
        topo: Topology,
        policy: str,
        *,
        queues: QueueConfig | None = None,
        unlimited: bool = False,
        contention: float = 0.0,
        local_on_ports: bool = False,
    ) -> None:
        self.knows = knows_survivors(policy)
        self.contention = contention
        self.planner = Planner(policy, queues or QueueConfig(), 0.0, unlimited=unlimited)
        self.tables = FlowTables()
        flows = self._load(cojobs, topo, policy, local_on_ports)
        # every flow in flat arrays, coflow after coflow (arrival order)
        src, dst, size = ([f[i] for f in flows] for i in range(3))
        counts = [len(b) for b in size]
        self.f_src = np.concatenate(src) if src else np.zeros(0, np.int64)
        self.f_dst = np.concatenate(dst) + len(topo.hosts) if dst else np.zeros(0, np.int64)
        self.f_size = np.concatenate(size) if size else np.zeros(0)
        self.f_cojob = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        # the working set: flows still moving, by global index (sorted), with their
        # remaining bytes, last rates (the allocator's warm start) and queues
        self.act = np.zeros(0, np.int64)
        self.rem = np.zeros(0)
        self.rate = np.zeros(0)
        self.ended: tuple[Flows, np.ndarray] | None = None  # ended at the last step
        self.band = np.zeros(0, np.int64)
        self.rband = np.zeros(0, np.int64)

    # -- arrivals and completions ----------------------------------------------------
    def _start(self, g: int) -> None:
        idx = self._begin(g)
        self.act = np.concatenate([self.act, idx])
        self.rem = np.concatenate([self.rem, self.f_size[idx]])
        self.rate = np.concatenate([self.rate, np.zeros(len(idx))])
        self.band = np.concatenate([self.band, np.full(len(idx), -1, np.int64)])
        self.rband = np.concatenate([self.rband, np.full(len(idx), -1, np.int64)])

    def _finish_done(self) -> bool:
        """Coflows with no bytes left finish now; True when any did."""
        busy = np.bincount(self.f_cojob[self.act], minlength=len(self.cojobs))
        return self._end([g for g in self.live if busy[g] == 0])

    # -- planning ----------------------------------------------------------------------
    def _replan(self) -> None:
        """The engine's plan: the live coflows, as the coordinator's planner sees them,
        its rows (every flow of every live coflow, local ones included) mapped onto the
        active flows by offsets. The flows that ended no longer count (``Engine``)."""
        self.ended = None
        if not self.live:
            return
        model = []
        for g in self.live:
            c, j = self.model[g], self.jobs[g]
            job = c.jobs[0]
            planned = type(job)(
                job.job_id, "flows", job.flows, stages=j.runs if self.knows else None,
                weight=job.weight,
            )  # fmt: skip
            started = tuple(self.cojobs[g].started)
            model.append(Cojob(c.cojob_id, (1,), (planned,), c.arrival, started, c.barrier))
        snap = build_snapshot(
            model, self.topo.hosts, known_survivors=self.knows, tables=self.tables
        )
        plan = self.planner.plan(snap, self.t)
        self.reschedules += plan.fresh
        live = np.asarray(self.live, dtype=np.int64)
        sizes = np.asarray([len(self.jobs[g].size) for g in self.live], dtype=np.int64)
        offset = np.zeros(len(self.cojobs), dtype=np.int64)
        offset[live] = np.cumsum(sizes) - sizes
        g = self.f_cojob[self.act]
        row = offset[g] + self.act - self.f_lo[g]
        self.band = plan.band[row].astype(np.int64)
        self.rband = plan.recv_band[row].astype(np.int64)

    # -- the loop ------------------------------------------------------------------------
    def _advance(self, nxt: float, limits: RunLimits) -> None:
        self.t += self._step(nxt)

    def _step(self, next_arrival: float) -> float:
        candidates = []
        if math.isfinite(next_arrival):
            candidates.append(next_arrival - self.t)
        if len(self.act):
            a = self.act
            flows = (self.f_src[a], self.f_dst[a], self.band, self.rband, self.f_cojob[a])
            got = flow_rates(flows, self.topo.capacity, self.contention, self.rate, self.ended)
            rates = got.rates
            self.allocations += 1
            self.fallbacks += not got.settled
            pos = rates > 0
            if pos.any():
                candidates.append(float((self.rem[pos] / rates[pos]).min()))
            self.rate = got.restart  # the next start (the rounds' last rates)
        dt = min((c for c in candidates if c > 0), default=math.inf)
        if not math.isfinite(dt):
            raise RuntimeError(f"simulation stalled at t={self.t}: no flow can move")
        if len(self.act):
            moved = np.minimum(self.rem, rates * dt)
            self.delivered += float(moved.sum())
            left = self.rem - moved
            left[left <= EPS * np.maximum(1.0, self.f_size[self.act])] = 0.0
            keep = left > EPS
            gone = ~keep
            a = self.act[gone]
            self.ended = (
                (self.f_src[a], self.f_dst[a], self.band[gone], self.rband[gone], self.f_cojob[a]),
                self.rate[gone],
            )
            if not keep.all():
                self.act, self.rem, self.rate = self.act[keep], left[keep], self.rate[keep]
                self.band, self.rband = self.band[keep], self.rband[keep]
            else:
                self.rem = left
        else:
            self.ended = None
        return dt


def flow_rates(
    flows: Flows,
    capacity: np.ndarray,
    penalty: float,
    start: np.ndarray,
    ended: tuple[Flows, np.ndarray] | None = None,
    max_cycle: int | None = None,
    max_rounds: int | None = None,
) -> Allocation:
    """``allocate_settled``'s rates of flows on a big switch (``flows``: uplink, downlink, band,
    receiver band, task of each), warm-started from ``start``: each flow crosses its
    uplink in its band and its downlink in its receiver band. ``ended``: the flows that
    ended at the last event and their last rates (``allocate_settled``'s ``ended``);
    ``max_cycle`` and ``max_rounds`` as ``allocate_settled``'s."""
    n = len(flows[0])
    if ended is not None and len(ended[1]):
        both = tuple(np.concatenate([a, b]) for a, b in zip(flows, ended[0], strict=True))
        start = np.concatenate([start, ended[1]])
        gone = np.arange(len(start)) >= n
        got = _flow_rates(both, capacity, penalty, start, gone, max_cycle, max_rounds)  # type: ignore[arg-type]
        return Allocation(got.rates[:n], got.settled, got.restart[:n])
    return _flow_rates(flows, capacity, penalty, start, None, max_cycle, max_rounds)


def _flow_rates(
    flows: Flows,
    capacity: np.ndarray,
    penalty: float,
    start: np.ndarray,
    gone: np.ndarray | None,
    max_cycle: int | None,
    max_rounds: int | None,
) -> Allocation:
    up, down, band, rband, task = flows
    n = len(up)
    pf = np.repeat(np.arange(n, dtype=np.int64), 2)
    pl = np.empty(2 * n, np.int64)
    pq = np.empty(2 * n, np.int64)
    pl[0::2], pl[1::2] = up, down
    pq[0::2], pq[1::2] = band, rband
    kw = {"start": start, "ended": gone, "max_cycle": max_cycle, "max_rounds": max_rounds}
    return allocate_settled((pf, pl), capacity, pq, task, penalty, per_crossing=True, **kw)
