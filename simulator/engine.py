"""Event-driven fluid simulation of cojobs on a topology under a scheduling policy.

Time jumps from event to event: a cojob arrival, the end of a compute gap, a flow
completion, a scheduling boundary. A job runs iterations: a compute gap, then the
iteration's flows (PS push and pull, or every ring hop, all at once); the next
iteration starts when all of them are done. A stage ends when every job in it has
finished its iterations; then the jobs that lose (their hidden stage count is reached)
are killed and the survivors start the next stage.

Scheduling calls the coordinator's planner (``pda.planning.Planner``): a plan at
every period boundary (progress is seen there, as the coordinator collects it) and at
every stage change or arrival (the coordinator's events); the planner orders afresh
once a period has passed since the last fresh order and otherwise re-maps the last
order (``period = 0``: afresh at every event and iteration).
"""

from __future__ import annotations

import math

import numpy as np

from grouper.common.limits import MAX_SIM_EVENTS
from grouper.common.progress import reported_done
from grouper.common.queues import QueueConfig
from grouper.pda.flow_table import FlowTable
from grouper.pda.model import Cojob, Job
from grouper.pda.planning import Planner
from grouper.pda.policies import knows_survivors, orders_flows
from grouper.pda.snapshot import FlowTables, build_snapshot
from grouper.simulator.allocator import allocate_settled
from grouper.simulator.limits import RunLimits, check_limits
from grouper.simulator.state import SimCojob, SimJob, SimResult, build_jobs, collect_result
from grouper.workloads.topology import Topology

EPS = 1e-9


class Engine:
    def __init__(
        self,
        cojobs: list[Cojob],
        topo: Topology,
        policy: str,
        *,
        queues: QueueConfig | None = None,
        period: float = 0.0,
        unlimited: bool = False,
        release_after: dict[str, tuple[str, int]] | None = None,
        contention: float = 0.0,
        ps_overlap: bool = False,
        ring_steps: bool = False,
        local_on_ports: bool = False,
        keep_within: float = 0.0,
        progress_step: float = 0.0,
    ) -> None:
        self.topo = topo
        self.policy = policy
        self.queues = queues or QueueConfig()
        self.period = period
        self.unlimited = unlimited
        self.knows = knows_survivors(policy)
        self.orders = orders_flows(policy)  # fs: a plan only when the flows change
        self.tables = FlowTables()
        self.jobs, self.cojobs = build_jobs(cojobs, topo, ps_overlap, ring_steps)
        self.release_after = release_after or {}
        self.contention = contention  # eta / b of Eq. 5; 0 = ideal fluid sharing
        # host-local flows (same source and destination host) are dropped, or cross the
        # host's own uplink and downlink (model.local_traffic: ports)
        self.local_on_ports = local_on_ports
        self.released: list[int] = []  # cojobs whose trigger fired, waiting to start
        self.t = 0.0
        # the planner sees progress as agents report it (``scheduling.progress_step``)
        self.progress_step = progress_step
        self.planner = Planner(
            policy, self.queues, period, unlimited=unlimited, keep_within=keep_within
        )
        # (time, cojobs as planned, FlowPlan) of every plan when a list is given: what a
        # test feeds the coordinator's planner to compare
        self.trace: list | None = None
        self.events = 0
        self.reschedules = 0
        self.delivered = 0.0
        self.allocations = self.fallbacks = 0  # rates computed; of them, rounds run out
        self._flatten()

    def _flatten(self) -> None:
        """Every job's flows in flat arrays (jobs in order, a job's flows together) and
        every hop of every flow: the per-event work is whole-array operations."""
        sizes = [len(j.size) for j in self.jobs]
        lo = np.cumsum([0, *sizes])
        nflows = int(lo[-1])
        self.f_job = np.repeat(np.arange(len(self.jobs), dtype=np.int64), sizes)
        self.f_size = np.concatenate([j.size for j in self.jobs]) if self.jobs else np.zeros(0)
        self.remaining = np.zeros(nflows)
        self.rate = np.zeros(nflows)  # last rates (the allocator's warm start)
        self.ended = np.zeros(0, np.int64)  # ended at the last step (the allocator's ``ended``)
        self.band = np.full(nflows, -1, dtype=np.int64)  # -1: not planned yet
        self.rband = np.full(nflows, -1, dtype=np.int64)
        paths = [p for j in self.jobs for p in j.paths]
        lengths = [len(p) for p in paths]
        # every hop: its link, its flow, and whether it is the first (the sender's NIC,
        # served by the flow's band; later hops by its DSCP's queue)
        self.h_link = np.concatenate(paths).astype(np.int64) if paths else np.zeros(0, np.int64)
        self.h_flow = np.repeat(np.arange(nflows, dtype=np.int64), lengths)
        self.h_first = np.zeros(len(self.h_link), dtype=bool)
        self.h_first[np.cumsum([0, *lengths[:-1]])[: len(lengths)]] = True
        for j, a, b in zip(self.jobs, lo[:-1], lo[1:], strict=True):
            j.remaining, j.band, j.rband = self.remaining[a:b], self.band[a:b], self.rband[a:b]
        self.until = np.full(len(self.jobs), math.inf)  # end of the compute gap, per job
        self.in_comm = np.zeros(len(self.jobs), dtype=bool)

    # -- job life ------------------------------------------------------------------
    def _set_phase(self, j: SimJob, phase: str, until: float = math.inf) -> None:
        j.phase = phase
        self.until[j.index] = until
        self.in_comm[j.index] = phase == "comm"

    def _end(self, j: SimJob) -> None:
        """The job is killed or done: it leaves the cluster now."""
        self._set_phase(j, "dead")
        j.end = self.t

    def _start_iteration(self, j: SimJob) -> None:
        if j.compute > 0:
            self._set_phase(j, "compute", self.t + j.compute)
        else:
            self._start_comm(j)

    def _start_comm(self, j: SimJob, step: int = 0, rnd: int = 0) -> None:
        """Start communication step ``step`` of round ``rnd`` of an iteration: PS pushes
        are step 0 and pulls step 1 (a server answers once it has every push); other
        jobs have one. A ring in steps has 2(W-1) rounds of one step (a barrier per
        round, as the traffic generator's replay has); other jobs have one round."""
        self._set_phase(j, "comm")
        j.current_step, j.current_round = step, rnd
        local = np.zeros(len(j.src), dtype=bool) if self.local_on_ports else j.src == j.dst
        j.remaining[:] = np.where(local | (j.step != step), 0.0, j.size)

    def _comm_finished(self, j: SimJob) -> bool:
        """True when the iteration's last step is done; else moves to the next step."""
        last = int(j.step.max(initial=0))
        while j.current_step < last or j.current_round + 1 < j.rounds:
            if j.current_step < last:
                self._start_comm(j, j.current_step + 1, j.current_round)
            else:
                self._start_comm(j, 0, j.current_round + 1)
            if (j.remaining > EPS).any():
                return False
        return True

    def _start_cojob(self, g: int) -> None:
        c = self.cojobs[g]
        c.stage = 0
        c.started.append(self.t)
        for ji in c.jobs:
            self._start_iteration(self.jobs[ji])

    def _iteration_done(self, j: SimJob) -> bool:
        """Returns True when a stage boundary changed the set of active stages."""
        j.done += 1
        c = self.cojobs[j.cojob]
        if j.done < c.bounds[j.stage]:
            self._start_iteration(j)
            return False
        if not c.barrier:
            return self._move_on(j)
        self._set_phase(j, "barrier")
        return self._check_barrier(j.cojob)

    def _move_on(self, j: SimJob) -> bool:
        """No barrier: a job that ended its stage dies or starts its next stage alone;
        a stage ends when no job is left in it."""
        c = self.cojobs[j.cojob]
        if j.runs <= j.stage + 1 or j.stage + 1 == len(c.iters):
            self._end(j)
        else:
            j.stage += 1
            if len(c.started) == j.stage:
                c.started.append(self.t)
            self._start_iteration(j)
        members = [self.jobs[i] for i in c.jobs]
        while len(c.finished) < len(c.started) and all(
            m.phase == "dead" or m.stage > len(c.finished) for m in members
        ):
            self._stage_finished(c)
        if all(m.phase == "dead" for m in members):
            c.stage = len(c.iters)  # done
        else:
            c.stage = len(c.finished)
        return True

    def _stage_finished(self, c: SimCojob) -> None:
        c.finished.append(self.t)
        for h, other in enumerate(self.cojobs):
            if self.release_after.get(other.cojob_id) == (c.cojob_id, len(c.finished)):
                other.arrival = self.t
                self.released.append(h)

    def _check_barrier(self, g: int) -> bool:
        c = self.cojobs[g]
        members = [self.jobs[i] for i in c.jobs if self.jobs[i].phase != "dead"]
        if any(m.phase != "barrier" for m in members):
            return False
        self._stage_finished(c)
        survivors = []
        for m in members:
            if m.runs <= c.stage + 1:
                self._end(m)
            else:
                survivors.append(m)
        if c.stage + 1 < len(c.iters) and survivors:
            c.stage += 1
            c.started.append(self.t)
            for m in survivors:
                m.stage = c.stage
                self._start_iteration(m)
        else:
            for m in survivors:
                self._end(m)
            c.stage = len(c.iters)  # done
        return True

    # -- scheduling ----------------------------------------------------------------
    def _specs(self, j: SimJob) -> FlowTable:
        """Built once per job, so the snapshot's flow tables are reused across steps."""
        if j.specs is None:
            j.specs = FlowTable(self.topo.hosts, j.src, j.dst, j.size * j.rounds)
        return j.specs

    def _active_cojobs(self) -> list[int]:
        return [g for g, c in enumerate(self.cojobs) if 0 <= c.stage < len(c.iters)]

    def _replan(self) -> None:
        """Plan the live flows with the planner the coordinator uses (``pda.planning``).
        A plan starts the rounds afresh from the moving flows' rates: the flows that
        ended no longer count (as the fast path's rebuild)."""
        self.ended = np.zeros(0, np.int64)
        live = [
            j
            for g in self._active_cojobs()
            for j in (self.jobs[i] for i in self.cojobs[g].jobs)
            if j.phase != "dead"
        ]
        if not live:
            return
        model = []
        for g in self._active_cojobs():
            c = self.cojobs[g]
            jobs = tuple(
                Job(
                    j.job_id,
                    "flows",
                    self._specs(j),
                    done=reported_done(j.done, c.iters, self.progress_step),
                    stages=j.runs if self.knows else None,
                    weight=j.weight,
                )
                for j in (self.jobs[i] for i in c.jobs)
                if j.phase != "dead"
            )
            started = tuple(c.started) + (math.inf,) * (len(c.iters) - len(c.started))
            model.append(Cojob(c.cojob_id, c.iters, jobs, c.arrival, started, c.barrier))
        hosts = self.topo.hosts
        snap = build_snapshot(model, hosts, known_survivors=self.knows, tables=self.tables)
        plan = self.planner.plan(snap, self.t)
        self.reschedules += plan.fresh
        rows = sum(len(j.size) for j in live)
        if rows != len(plan.band):
            raise RuntimeError(f"plan has {len(plan.band)} flows, the simulation {rows}")
        row = 0
        for j in live:
            n = len(j.size)
            j.band[:] = plan.band[row : row + n]
            j.rband[:] = plan.recv_band[row : row + n]
            row += n
        if self.trace is not None:
            self.trace.append((self.t, model, plan))

    # -- the loop ------------------------------------------------------------------
    def run(
        self,
        max_events: int = MAX_SIM_EVENTS,
        max_time: float = math.inf,
        deadline: float = math.inf,
    ) -> SimResult:
        """Simulate to the end; past ``max_time`` simulated time units or the
        ``time.monotonic()`` ``deadline``, stop with a one-line ConfigError."""
        pending = list(range(len(self.cojobs)))
        limits = RunLimits(max_time, deadline, max_events)
        while True:
            changed = fresh_needed = False
            progressed = True
            while progressed:
                progressed = False
                if self.released:
                    pending = sorted(pending, key=lambda g: self.cojobs[g].arrival)
                    self.released.clear()
                while pending and self.cojobs[pending[0]].arrival <= self.t + EPS:
                    self._start_cojob(pending.pop(0))
                    changed = progressed = True
                for i in np.flatnonzero(self.until <= self.t + EPS).tolist():
                    self._start_comm(self.jobs[i])  # its compute gap is over
                    progressed = True
                for j in self._comm_done():
                    if j.phase == "comm" and not (j.remaining > EPS).any():
                        progressed = True
                        if self._comm_finished(j):
                            changed |= self._iteration_done(j)
                            fresh_needed = True
            if not self._active_cojobs() and not any(
                math.isfinite(self.cojobs[g].arrival) for g in pending
            ):
                break  # cojobs still pending never got their trigger
            self.events += 1
            check_limits(self.policy, self.t, self.events, limits)
            # as the coordinator: progress is seen at period boundaries, stage changes
            # and arrivals at once (events); the planner decides fresh order or re-map
            if self.period == 0:
                if changed or (fresh_needed and self.orders):
                    self._replan()
            elif changed or self.t >= self.planner.next_fresh - EPS:
                self._replan()
            dt = self._advance_time(pending, self.planner.next_fresh)
            self.t += dt
        return self._result()

    def _comm_done(self) -> list[SimJob]:
        """Jobs in communication with no bytes left in their current step, in order."""
        busy = np.bincount(self.f_job[self.remaining > EPS], minlength=len(self.jobs))
        return [self.jobs[i] for i in np.flatnonzero(self.in_comm & (busy == 0)).tolist()]

    def _advance_time(self, pending: list[int], next_period: float) -> float:
        active = self._active_flows()
        candidates = []
        if pending and math.isfinite(self.cojobs[pending[0]].arrival):
            candidates.append(self.cojobs[pending[0]].arrival - self.t)
        gaps = self.until - self.t  # finite only for jobs in a compute gap
        if (gaps > 0).any():
            candidates.append(float(gaps[gaps > 0].min()))
        if self.period > 0:
            candidates.append(next_period - self.t)
        if len(active):
            rates, restart = self._rates(active)  # warm-started from ``self.rate``
            pos = rates > 0
            if pos.any():
                candidates.append(float((self.remaining[active][pos] / rates[pos]).min()))
            # a job's last rates stay its warm start until it moves again
            moving = np.zeros(len(self.jobs), dtype=bool)
            moving[self.f_job[active]] = True
            self.rate[moving[self.f_job]] = 0.0
            self.rate[active] = restart  # the rounds' last rates (after a fallback too)
        dt = min((c for c in candidates if c > 0), default=math.inf)
        if not math.isfinite(dt):
            raise RuntimeError(f"simulation stalled at t={self.t}: no flow can move")
        if len(active):
            rem = self.remaining[active]
            moved = np.minimum(rem, rates * dt)
            self.delivered += float(moved.sum())
            left = rem - moved
            left[left <= EPS * np.maximum(1.0, self.f_size[active])] = 0.0
            self.remaining[active] = left
            self.ended = active[left == 0.0]
        else:  # nothing moved, so nothing ended at this event
            self.ended = np.zeros(0, np.int64)
        return dt

    def _active_flows(self) -> np.ndarray:
        """Indices of the flows that still have bytes to move (all of jobs in
        communication), checked to carry a plan's bands."""
        active = np.flatnonzero(self.remaining > EPS)
        unplanned = active[(self.band[active] < 0) | (self.rband[active] < 0)]
        if len(unplanned):
            j = self.jobs[int(self.f_job[unplanned[0]])]
            raise RuntimeError(
                f"job {j.job_id}: a flow moves with no band from a plan (flows and plan "
                "out of step)"
            )
        return active

    def _rates(self, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rates of the ``active`` flows, each hop served by its own queue (per-link
        strict priority): the sender's NIC by the flow's band, every later hop by its
        DSCP's; and the next allocation's start (``Allocation.restart``)."""
        live = np.zeros(len(self.remaining), dtype=bool)
        live[active] = True
        live[self.ended] = True  # their last rates in the use the rounds start from
        sel = live[self.h_flow]
        hf = self.h_flow[sel]
        renum = np.cumsum(live) - 1
        queues = np.where(self.h_first[sel], self.band[hf], self.rband[hf])
        flows = np.flatnonzero(live)
        got = allocate_settled(
            (renum[hf], self.h_link[sel]),
            self.topo.capacity,
            queues,
            self.f_job[flows],
            self.contention,
            per_crossing=True,
            start=self.rate[flows],
            ended=self.remaining[flows] <= EPS,
        )
        self.allocations += 1
        self.fallbacks += not got.settled
        return got.rates[renum[active]], got.restart[renum[active]]

    def _result(self) -> SimResult:
        return collect_result(self)
