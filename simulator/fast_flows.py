"""The fast path for coflow-shaped workloads with the contention penalty on.

:class:`grouper.simulator.fast.FastEngine` runs coflow-shaped workloads on ideal links
(no contention penalty: every coflow trace); with the penalty on (Wang et al., Eq. 5) a
queue's efficiency depends on how many coflows share it, so rates are not the same per
class of flows and this engine, the fast path before #32's rewrite, gives them flow by
flow through ``allocate``.
"""

from __future__ import annotations

import math

import numpy as np

from grouper.pda.model import Cojob
from grouper.pda.planning import Planner
from grouper.pda.policies import knows_survivors
from grouper.pda.priorities import QueueConfig
from grouper.pda.snapshot import FlowTables, build_snapshot
from grouper.simulator.coflow_loop import CoflowLoop
from grouper.simulator.fast_kernel import Classes, build_classes, class_rates
from grouper.simulator.fast_state import EPS
from grouper.simulator.limits import RunLimits
from grouper.simulator.state import SimCojob, SimJob
from grouper.workloads.topology import Topology


class FlowFastEngine(CoflowLoop):
    """The engine's semantics on coflow-shaped workloads (:func:`coflow_shaped`), flows
    in flat arrays, rates through ``allocate`` (used with the contention penalty on)."""

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
        self.topo = topo
        self.policy = policy
        self.knows = knows_survivors(policy)
        self.contention = contention
        self.local_on_ports = local_on_ports
        self.planner = Planner(policy, queues or QueueConfig(), 0.0, unlimited=unlimited)
        self.tables = FlowTables()
        self.model = sorted(cojobs, key=lambda c: c.arrival)  # stable, as the engine's
        self.events = 0
        self.reschedules = 0
        self.delivered = 0.0
        self.t = 0.0
        self._build()

    def _build(self) -> None:
        """Every flow in flat arrays, coflow after coflow (arrival order)."""
        host = {h: i for i, h in enumerate(self.topo.hosts)}
        n = len(self.topo.hosts)
        src, dst, size, counts = [], [], [], []
        self.jobs: list[SimJob] = []
        self.cojobs: list[SimCojob] = []
        for g, c in enumerate(self.model):
            job = c.jobs[0]
            s = np.fromiter((host[f.src] for f in job.flows), np.int64, len(job.flows))
            d = np.fromiter((host[f.dst] for f in job.flows), np.int64, len(job.flows))
            b = np.fromiter((f.bytes for f in job.flows), float, len(job.flows))
            src.append(s)
            dst.append(d)
            size.append(b)
            counts.append(len(b))
            runs = job.stages or c.num_stages
            self.jobs.append(
                SimJob(g, job.job_id, s, d, b, [], 0.0, runs, index=g, weight=job.weight)
            )
            self.cojobs.append(SimCojob(c.cojob_id, c.arrival, (1,), [g], barrier=c.barrier))
        self.f_lo = np.cumsum([0, *counts])[:-1].astype(np.int64)
        self.f_src = np.concatenate(src) if src else np.zeros(0, np.int64)
        self.f_dst = np.concatenate(dst) + n if dst else np.zeros(0, np.int64)  # downlinks
        self.f_size = np.concatenate(size) if size else np.zeros(0)
        self.f_cojob = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        # the working set: flows still moving, by global index (sorted), with their
        # remaining bytes, last rates (the allocator's warm start) and queues
        self.act = np.zeros(0, np.int64)
        self.rem = np.zeros(0)
        self.rate = np.zeros(0)
        self.band = np.zeros(0, np.int64)
        self.rband = np.zeros(0, np.int64)
        self.live: list[int] = []  # cojobs started and not finished, by index
        self.cls: Classes | None = None  # the active flows' rate classes (per plan)

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
        active flows by offsets."""
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
        self.cls = None
        if self.contention <= 0 and len(self.act):
            up, down = self.f_src[self.act], self.f_dst[self.act]
            self.cls = build_classes(up, down, self.band, self.rband)

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
            rates = class_rates(self.cls, flows, self.topo.capacity, self.contention, self.rate)
            pos = rates > 0
            if pos.any():
                candidates.append(float((self.rem[pos] / rates[pos]).min()))
            self.rate = rates
        dt = min((c for c in candidates if c > 0), default=math.inf)
        if not math.isfinite(dt):
            raise RuntimeError(f"simulation stalled at t={self.t}: no flow can move")
        if len(self.act):
            moved = np.minimum(self.rem, self.rate * dt)
            self.delivered += float(moved.sum())
            left = self.rem - moved
            left[left <= EPS * np.maximum(1.0, self.f_size[self.act])] = 0.0
            keep = left > EPS
            if not keep.all():
                self.act, self.rem, self.rate = self.act[keep], left[keep], self.rate[keep]
                self.band, self.rband = self.band[keep], self.rband[keep]
                if self.cls is not None:
                    self.cls.of_flow = self.cls.of_flow[keep]
            else:
                self.rem = left
        return dt
