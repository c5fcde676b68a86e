"""SJF-BCO and its baselines (Yu et al. 2022, Section 5, Algorithms 1-3; Section 7).

Planning is offline, on estimates. ``U[g]`` is when GPU g is next free, and a job's
estimated run time is ``rho = tau F (1 + xi (s > 1) + xi s)``: its overhead on ``s``
servers, and one contender when ``s > 1`` (our reading of the paper's ``u``). A job may
only use GPUs with ``U[g] + rho <= theta`` (theta is the bound on any GPU's busy time,
Problem 14). It starts when its last chosen GPU is free, and those GPUs are then busy
until it ends.

* ``sjf-bco``: jobs by size, smallest first (Algorithm 1). A job of at most ``kappa``
  GPUs uses FA-FFP (Algorithm 2): fragments first, i.e. GPUs on servers already in
  use, least busy first. A larger one uses LBSGF (Algorithm 3): the least busy servers
  by average ``U``, as many as hold ``lambda G`` GPUs, and the least busy GPUs there.
  theta is found by bisection over ``[1, T]``, for every kappa from 1 to the largest
  job, and the smallest estimated makespan is kept. ``sjf-bco:k=K``
  fixes kappa (Fig. 5), ``:l=L`` sets lambda (Fig. 7). FA-FFP and LBSGF themselves are
  :class:`workloads.placement.SjfBco` (FA-FFP ``by-gpu``), shared with the stage-level
  ``sjf-bco`` placement; its docstring sets out how the two callers differ.
* ``ff``: the first free GPUs, server by server; ``ls``: the least busy GPUs. Both
  search theta by bisection, like SJF-BCO. ``rand``: random free GPUs, theta = T. All
  of them see the jobs in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from grouper.common.errors import ConfigError
from grouper.workloads.placement import SjfBco
from grouper.workloads.rarmix import RarJob, RarMix

KINDS = ("sjf-bco", "ff", "ls", "rand")


@dataclass(frozen=True)
class RarPolicy:
    kind: str
    kappa: int | None = None  # sjf-bco: None = searched (Algorithm 1)
    lam: float | None = None  # sjf-bco: None = the workload's lambda

    @property
    def name(self) -> str:
        if self.kind != "sjf-bco":
            return self.kind
        parts = [self.kind]
        if self.kappa is not None:
            parts.append(f"k={self.kappa}")
        if self.lam is not None:
            parts.append(f"l={self.lam:g}")
        return ":".join(parts)


def parse_rar_policy(spec: str, path: str = "--placement") -> RarPolicy:
    kind, *opts = spec.strip().split(":")
    if kind not in KINDS:
        raise ConfigError(path, f"must be sjf-bco[:k=K][:l=L], ff, ls or rand; got {spec!r}")
    if opts and kind != "sjf-bco":
        raise ConfigError(path, f"{kind} takes no options, got {spec!r}")
    kappa, lam = None, None
    for o in opts:
        key, _, val = o.partition("=")
        try:
            if key == "k" and val.isdigit() and 1 <= int(val) <= 4096:
                kappa = int(val)
            elif key == "l" and 1 <= float(val) <= 1e6:
                lam = float(val)
            else:
                raise ValueError(o)
        except ValueError:
            raise ConfigError(path, f"options are k=K (1-4096) and l=L (>= 1); got {o!r}") from None
    return RarPolicy(kind, kappa, lam)


@dataclass
class Plan:
    gpus: list[np.ndarray]  # per job, in job id order
    start: np.ndarray  # planned start per job
    order: list[int]  # jobs in planning order
    theta: float
    kappa: int | None
    est_makespan: float


class Planner:
    def __init__(self, mix: RarMix, policy: RarPolicy, seed: int = 1) -> None:
        self.mix, self.policy = mix, policy
        self.caps = np.asarray(mix.servers)
        self.lam = policy.lam or mix.lam
        self.bco = SjfBco(self.caps, self.lam, fragments="by-gpu")
        self.server_of = self.bco.server_of
        self.rng = np.random.default_rng(seed)
        self.order = sorted(range(len(mix.jobs)), key=lambda i: (mix.jobs[i].gpus, i))
        # T: every job in a row, each on as many servers as it could span, fits
        worst = [self.rho(j, min(j.gpus, len(self.caps))) for j in mix.jobs]
        self.horizon = float(np.ceil(sum(worst) + 1))

    def rho(self, job: RarJob, servers: int) -> float:
        multi = servers > 1
        return job.alone * (1 + job.xi * multi + job.xi * servers * multi)

    # GPU choices: each gets the GPUs that may take the job (``ok``) and returns its
    # choice, or None. FF, FA-FFP and RAND choose among the GPUs free at the earliest
    # moment enough are free (a job never waits for a GPU it could do without).

    @staticmethod
    def free_first(job: RarJob, U: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
        idx = np.flatnonzero(ok)
        if len(idx) < job.gpus:
            return None
        t = np.partition(U[idx], job.gpus - 1)[job.gpus - 1]
        return idx[U[idx] <= t]

    def fa_ffp(self, job: RarJob, U: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
        idx = self.free_first(job, U, ok)
        if idx is None:
            return None
        opened = np.bincount(self.server_of, weights=U > 0, minlength=len(self.caps)) > 0
        got = self.bco.fa_ffp(job.gpus, U, idx, opened)
        return None if got is None else np.sort(got)

    def lbsgf(self, job: RarJob, U: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
        busy = np.bincount(self.server_of, weights=U, minlength=len(self.caps)) / self.caps
        got = self.bco.lbsgf(job.gpus, U, np.flatnonzero(ok), busy)
        return None if got is None else np.sort(got)

    def first_fit(self, job: RarJob, U: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
        idx = self.free_first(job, U, ok)
        return None if idx is None else idx[: job.gpus]

    def least(self, job: RarJob, U: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
        idx = np.flatnonzero(ok)
        if len(idx) < job.gpus:
            return None
        return np.sort(idx[np.argsort(U[idx], kind="stable")[: job.gpus]])

    def random(self, job: RarJob, U: np.ndarray, ok: np.ndarray) -> np.ndarray | None:
        idx = self.free_first(job, U, ok)
        if idx is None:
            return None
        return np.sort(self.rng.choice(idx, size=job.gpus, replace=False))

    # planning -------------------------------------------------------------------------

    def once(
        self, theta: float, pick: Callable[[RarJob, np.ndarray, np.ndarray], np.ndarray | None]
    ) -> Plan | None:
        """Every job in order under the bound ``theta``; None when one does not fit."""
        U = np.zeros(len(self.server_of))
        gpus: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(self.mix.jobs)
        start = np.zeros(len(self.mix.jobs))
        for i in self.order:
            job = self.mix.jobs[i]
            ok = U + self.rho(job, 1) <= theta
            got = pick(job, U, ok)
            if got is None:
                return None
            t0 = float(U[got].max())
            end = t0 + self.rho(job, len(np.unique(self.server_of[got])))
            if end > theta:
                return None
            U[got] = end
            gpus[i], start[i] = got, t0
        return Plan(gpus, start, list(self.order), theta, None, float(U.max()))

    def pick_for(self, kappa: int) -> Callable[[RarJob, np.ndarray, np.ndarray], object]:
        def pick(job: RarJob, U: np.ndarray, ok: np.ndarray) -> object:
            return self.fa_ffp(job, U, ok) if job.gpus <= kappa else self.lbsgf(job, U, ok)

        return pick

    def bisect(self, pick: Callable[[RarJob, np.ndarray, np.ndarray], object]) -> Plan | None:
        """The smallest theta in [1, T] that fits every job, by bisection (Algorithm 1,
        lines 5-23), and its plan."""
        best, left, right = None, 1, int(self.horizon)
        while left <= right:
            theta = (left + right) // 2
            plan = self.once(float(theta), pick)
            if plan is not None and (best is None or plan.est_makespan <= best.est_makespan):
                best, right = plan, theta - 1
            else:
                left = theta + 1
        return best

    def plan(self) -> Plan:
        kind = self.policy.kind
        if kind == "rand":
            plan = self.once(self.horizon, self.random)
            assert plan is not None  # the horizon fits every job in a row
            return plan
        if kind != "sjf-bco":
            return self._found(self.bisect(self.first_fit if kind == "ff" else self.least))
        # Algorithm 1 tries every kappa inside each bisection step. Feasibility is not
        # monotone in theta (the bound also steers which GPUs are chosen), so a step
        # that fits with no kappa can send the search past a bound that fits with one:
        # each kappa gets its own bisection here, and the best plan is kept.
        top = max(j.gpus for j in self.mix.jobs)
        kappas = [self.policy.kappa] if self.policy.kappa is not None else range(1, top + 1)
        best = None
        for kappa in kappas:
            plan = self.bisect(self.pick_for(kappa))
            if plan is not None and (best is None or plan.est_makespan < best.est_makespan):
                plan.kappa, best = kappa, plan
        return self._found(best)

    def _found(self, best: Plan | None) -> Plan:
        if best is None:  # cannot happen: theta = T fits every job in a row
            raise RuntimeError(f"{self.policy.name}: no feasible bound up to {self.horizon}")
        return best
