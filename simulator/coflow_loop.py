"""The event loop of the two coflow engines (``fast.FastEngine``, and
``fast_flows.FlowFastEngine`` with the contention penalty): cojobs arrive, coflows
whose flows all ended finish, a plan when either happened, then the engine moves
time on to its next event."""

from __future__ import annotations

import math

import numpy as np

from grouper.common.limits import MAX_SIM_EVENTS
from grouper.pda.flow_table import flow_arrays
from grouper.pda.model import Cojob
from grouper.simulator.fast_state import EPS
from grouper.simulator.limits import RunLimits, check_limits
from grouper.simulator.state import SimCojob, SimJob, SimResult, collect_result
from grouper.workloads.topology import Topology


class CoflowLoop:
    """A subclass holds ``cojobs`` (sorted by arrival), ``live``, ``t``, ``events`` and
    ``policy``, its one-job ``jobs`` with their flows from ``f_lo[g]`` on, and gives
    ``_start``, ``_finish_done``, ``_replan`` and ``_advance``."""

    topo: Topology
    model: list[Cojob]
    cojobs: list[SimCojob]
    jobs: list[SimJob]
    f_lo: np.ndarray
    local_on_ports: bool
    live: list[int]
    t: float
    events: int
    reschedules: int
    delivered: float
    allocations: int  # rates computed; of them, rounds that ran out (the fallback's)
    fallbacks: int
    policy: str

    def _load(
        self, cojobs: list[Cojob], topo: Topology, policy: str, local_on_ports: bool
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """What both engines hold, set up; every coflow's flows as (src, dst, bytes)
        host-index arrays, coflow after coflow in arrival order."""
        self.topo, self.policy, self.local_on_ports = topo, policy, local_on_ports
        self.model = sorted(cojobs, key=lambda c: c.arrival)  # stable, as the engine's
        self.events = self.reschedules = self.allocations = self.fallbacks = 0
        self.delivered = self.t = 0.0
        self.live = []  # cojobs started and not finished, by index
        self.jobs, self.cojobs = [], []
        host = {h: i for i, h in enumerate(topo.hosts)}
        flows = []
        for g, c in enumerate(self.model):
            job = c.jobs[0]
            s, d, b = flow_arrays(job.flows, host, f"cojobs[{g}].jobs[0]")
            flows.append((s, d, b))
            runs = job.stages or c.num_stages
            self.jobs.append(
                SimJob(g, job.job_id, s, d, b, [], 0.0, runs, index=g, weight=job.weight)
            )
            self.cojobs.append(SimCojob(c.cojob_id, c.arrival, (1,), [g], barrier=c.barrier))
        self.f_lo = np.cumsum([0, *(len(b) for _, _, b in flows)])[:-1].astype(np.int64)
        return flows

    def _start(self, g: int) -> None:
        raise NotImplementedError

    def _finish_done(self) -> bool:
        raise NotImplementedError

    def _begin(self, g: int) -> np.ndarray:
        """Cojob ``g`` arrives: its one stage starts; the indices of its flows that
        cross the fabric."""
        c, j = self.cojobs[g], self.jobs[g]
        c.stage = 0
        c.started.append(self.t)
        j.phase = "comm"
        lo = self.f_lo[g]
        idx = np.arange(lo, lo + len(j.size), dtype=np.int64)
        if not self.local_on_ports:
            idx = idx[j.src != j.dst]
        self.live.append(g)
        return idx

    def _end(self, done: list[int]) -> bool:
        """The coflows ``done`` finish now (the engine's barrier: one job, one
        iteration, so the job ends with its stage). True when any did."""
        for g in done:
            c, j = self.cojobs[g], self.jobs[g]
            j.done, j.phase, j.end = 1, "dead", self.t
            c.finished.append(self.t)
            c.stage = 1
            self.live.remove(g)
        return bool(done)

    def _replan(self) -> None:
        raise NotImplementedError

    def _advance(self, nxt: float, limits: RunLimits) -> None:
        """Move ``t`` on to the next event (``nxt``: the next arrival, or inf)."""
        raise NotImplementedError

    def run(
        self,
        max_events: int = MAX_SIM_EVENTS,
        max_time: float = math.inf,
        deadline: float = math.inf,
    ) -> SimResult:
        """Simulate to the end; past ``max_time`` simulated time units, ``max_events``
        or the ``time.monotonic()`` ``deadline``, stop with a one-line ConfigError (the
        engine's limits)."""
        pending = 0  # next cojob to arrive (they are sorted by arrival)
        limits = RunLimits(max_time, deadline, max_events)
        ncj = len(self.cojobs)
        while True:
            changed = False
            progressed = True
            while progressed:
                progressed = False
                while pending < ncj and self.cojobs[pending].arrival <= self.t + EPS:
                    self._start(pending)
                    pending += 1
                    changed = progressed = True
                if self._finish_done():
                    changed = progressed = True
            if not self.live and pending == ncj:
                break
            self.events += 1
            check_limits(self.policy, self.t, self.events, limits)
            if changed:
                self._replan()
            nxt = self.cojobs[pending].arrival if pending < ncj else math.inf
            self._advance(nxt, limits)
        return collect_result(self)
