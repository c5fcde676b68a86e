"""The fast path for coflow-shaped workloads: trace scale in seconds.

A workload is coflow-shaped when every cojob is one job of explicit flows running one
stage of one iteration with no compute, on a big switch, without release triggers,
planned at every event (period 0): the coflow benchmark's traces (``coflow:PATH``) and
any workload written the same way. :class:`FastEngine` then gives the same completion
times as :class:`simulator.engine.Engine` (a hypothesis test checks it, every policy)
while doing per event only what the event touches:

* **No Python object per flow in the loop.** Flows are flat arrays; flows with the
  same links and queues form a class with one rate and one ``served`` counter
  (``fast_state``), and runs of events between two plans stay in compiled code.
* **No replanning where the order cannot have changed.** A coflow's snapshot load
  depends only on which coflows are live (one iteration: nothing is done until all
  is), so the policy orders only when a coflow arrives or ends, exactly where the
  engine plans, from a snapshot of the live coflows' units whose loads were computed
  once (:meth:`FastEngine._unit_snapshot`); its bands per (coflow, port) are the
  planner's (``schedule`` and ``port_bands``, unchanged).
* **Work per event proportional to what moves.** The allocator's fixed point runs over
  the classes whose two queues have capacity left (``fast_fill``).

With the contention penalty on, rates are not the same per class:
``fast_flows.FlowFastEngine`` runs those workloads.
"""

from __future__ import annotations

import math

import numpy as np

from grouper.pda.model import Cojob
from grouper.pda.policies import schedule
from grouper.pda.priorities import QueueConfig, port_bands
from grouper.pda.snapshot import JobFlows, Snapshot, flow_loads
from grouper.simulator.allocator import EPS as ALLOC_EPS
from grouper.simulator.coflow_loop import CoflowLoop
from grouper.simulator.fast_state import Flows, advance, empty_classes, rebuild
from grouper.simulator.limits import RunLimits
from grouper.workloads.topology import Topology


def coflow_shaped(
    cojobs: list[Cojob] | tuple[Cojob, ...],
    topo: Topology,
    period: float,
    release_after: dict | None,
    ring_steps: bool = False,
) -> bool:
    """Whether :class:`FastEngine` can run these cojobs (see the module's docstring)."""
    if period != 0 or release_after or topo.spines != 0 or ring_steps:
        return False
    for c in cojobs:
        if c.stage_iterations != (1,) or len(c.jobs) != 1:
            return False
        job = c.jobs[0]
        if job.arch != "flows" or job.compute_time != 0:
            return False
    return True


class FastEngine(CoflowLoop):
    """The engine's semantics on coflow-shaped workloads (:func:`coflow_shaped`), on
    ideal links (no contention penalty)."""

    def __init__(
        self,
        cojobs: list[Cojob],
        topo: Topology,
        policy: str,
        *,
        queues: QueueConfig | None = None,
        unlimited: bool = False,
        local_on_ports: bool = False,
    ) -> None:
        self.queues = queues or QueueConfig()
        self.unlimited = unlimited
        self.tol = ALLOC_EPS * max(float(topo.capacity.max(initial=0.0)), 1.0)
        flows = self._load(cojobs, topo, policy, local_on_ports)
        # the snapshot's loads of one iteration per coflow and its flow rows, as
        # build_snapshot computes them
        tables = [JobFlows((), s, d, b) for s, d, b in flows]
        self.iter_loads, (fj, fs, fd, fb) = flow_loads(tables, len(topo.hosts))
        n = len(topo.hosts)
        remote = fs != fd
        self.sent = np.bincount(fj[remote], weights=fb[remote], minlength=len(tables))
        self.flows = Flows(fs, fd + n, fb, fj, np.zeros(len(fb)), np.zeros(len(tables), np.int64))
        self.cls = empty_classes()
        self.net = None
        self.new: list[np.ndarray] = []  # flows started since the last plan
        self.q = self.queues.queues

    # -- arrivals and completions ----------------------------------------------------
    def _start(self, g: int) -> None:
        idx = self._begin(g)
        self.new.append(idx)
        self.flows.busy[g] = len(idx)

    def _finish_done(self) -> bool:
        """Coflows with no bytes left finish now; True when any did."""
        return self._end([g for g in self.live if self.flows.busy[g] == 0])

    # -- planning ----------------------------------------------------------------------
    def _unit_snapshot(self, live: np.ndarray) -> Snapshot:
        """The snapshot the planner would build of the live coflows, as the policies
        read it: one stage (one job) per coflow with its loads of one iteration. Its
        flow rows are one per job: the policies use them only to find each job's unit."""
        loads = self.iter_loads[live]
        ids = [self.cojobs[g].cojob_id for g in live]
        rows = np.arange(len(live), dtype=np.int64)
        weight = np.asarray([self.jobs[g].weight for g in live], dtype=float)
        zeros = np.zeros(len(live), dtype=np.int64)
        return Snapshot(
            hosts=tuple(self.topo.hosts),
            cojob_ids=ids,
            cojob_arrival=np.asarray([self.cojobs[g].arrival for g in live], dtype=float),
            stage_ids=[f"{cid}/1" for cid in ids],
            stage_cojob=rows,
            stage_number=np.ones(len(live), dtype=np.int64),
            stage_prev=np.full(len(live), -1, dtype=np.int64),
            stage_started=np.asarray([self.cojobs[g].started[0] for g in live], dtype=float),
            stage_loads=loads,
            stage_weight=weight,
            job_ids=[f"{self.cojobs[g].cojob_id}:{self.jobs[g].job_id}" for g in live],
            job_cojob=rows,
            job_stage=rows,
            job_iter_loads=loads,
            job_remaining=self.sent[live].astype(float),
            job_weight=weight,
            flow_job=rows,
            flow_src=zeros,
            flow_dst=zeros,
            flow_bytes=np.zeros(len(live)),
        )

    def _band_table(self, live: np.ndarray) -> np.ndarray:
        """Band of every live coflow on every port (rows in ``live`` order): the
        planner's ``port_bands``, the default band where a coflow has no load."""
        cfg = self.queues
        table = np.full((len(live), 2 * len(self.topo.hosts)), cfg.default_band, np.int64)
        if self.policy == "fs":  # nothing is ordered: every flow in the default band
            return table
        sched = schedule(self._unit_snapshot(live), self.policy)
        pb = port_bands(sched.loads, sched.order, cfg, np.ones(len(live), bool), self.unlimited)
        b = pb.band  # each row's entries read off the CSR's indptr: no COO copy
        table[np.repeat(np.arange(len(live)), np.diff(b.indptr)), b.indices] = b.data - 1
        return table

    def _replan(self) -> None:
        """The engine's plan at this event: bands of the live coflows, and the classes
        of the flows still moving under them."""
        if not self.live:
            return
        live = np.asarray(self.live, dtype=np.int64)
        table = self._band_table(live)
        self.reschedules += 1
        self.q = max(self.q, int(table.max()) + 1)
        row = np.full(len(self.cojobs), -1, dtype=np.int64)
        row[live] = np.arange(len(live))
        new = np.concatenate(self.new) if self.new else np.zeros(0, np.int64)
        self.new = []
        self.cls, self.net = rebuild(
            self.cls, self.flows, new, table, row, self.q, len(self.topo.hosts),
            np.asarray(self.topo.capacity, dtype=float), self.queues.default_band, self.tol,
        )  # fmt: skip

    # -- the loop ------------------------------------------------------------------------
    def _advance(self, nxt: float, limits: RunLimits) -> None:
        """This event and the ones after it up to the next arrival, the next coflow to
        end or the next check of the limits (``check_limits`` looks at the wall clock
        every 256 events), in compiled code."""
        if self.net is None or not self.live:  # nothing moves: on to the arrival
            if not math.isfinite(nxt):
                raise RuntimeError(f"simulation stalled at t={self.t}: no flow can move")
            self.t = nxt
            return
        budget = min(255 - self.events % 256, limits.max_events - self.events)
        out = np.zeros(6)
        self.t = advance(
            self.cls, self.flows, self.net, self.q, self.tol, self.t, nxt, max(budget, 0),
            limits.max_time, out,
        )  # fmt: skip
        if out[3]:
            raise RuntimeError(f"simulation stalled at t={self.t}: no flow can move")
        self.events += int(out[0])
        self.delivered += float(out[1])
        self.allocations += int(out[4])
        self.fallbacks += int(out[5])
