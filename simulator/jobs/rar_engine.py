"""Run a :class:`~simulator.jobs.sjfbco.Plan` as it really goes (Yu et al.'s model).

The plan fixes each job's GPUs and, per GPU, the order of its jobs. A job starts when
every one of its GPUs has finished the jobs planned before it there (gang scheduling,
no preemption). While it runs, an iteration takes ``tau`` on one server, or
``tau (1 + xi p + xi s)`` on ``s > 1`` servers, ``p`` the most other running
multi-server jobs on one of its servers (recomputed at every start and end). So the
real makespan differs from the plan's estimate wherever contention does.
"""

from __future__ import annotations

import heapq
import time

import numpy as np

from grouper.simulator.jobs.engine import JobsResult
from grouper.simulator.jobs.sjfbco import Plan, Planner, RarPolicy
from grouper.workloads.rarmix import RarMix


def _gpu_successors(plan: Plan, n: int) -> tuple[np.ndarray, list[list[int]]]:
    """Per job: how many jobs planned before it share one of its GPUs, and the jobs
    that wait for it on one of its GPUs (each GPU runs its jobs in planned order)."""
    rank = {job: k for k, job in enumerate(plan.order)}
    by_start = sorted(range(n), key=lambda i: (plan.start[i], rank[i]))
    waiting_on = np.zeros(n, dtype=np.int64)
    after: list[list[int]] = [[] for _ in range(n)]
    last_on: dict[int, int] = {}
    for i in by_start:
        for g in plan.gpus[i].tolist():
            if g in last_on:
                after[last_on[g]].append(i)
                waiting_on[i] += 1
            last_on[g] = i
    return waiting_on, after


def execute(mix: RarMix, plan: Plan, server_of: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of every job."""
    n = len(mix.jobs)
    servers = [np.unique(server_of[g]) for g in plan.gpus]
    multi = np.array([len(s) > 1 for s in servers])
    waiting_on, after = _gpu_successors(plan, n)
    left = np.array([j.iterations for j in mix.jobs], dtype=float)
    rate = np.zeros(n)
    stamp = np.zeros(n)
    start = np.full(n, np.nan)
    end = np.full(n, np.nan)
    running: set[int] = set()
    on_server: dict[int, set[int]] = {}
    version = np.zeros(n, dtype=np.int64)
    events: list[tuple[float, int, int]] = []
    now = 0.0

    def rerate() -> None:
        for i in running:
            left[i] -= (now - stamp[i]) * rate[i]
            stamp[i] = now
            job = mix.jobs[i]
            tau = job.tau
            if multi[i]:
                p = max(len(on_server[s]) - 1 for s in servers[i].tolist())
                tau *= 1 + job.xi * p + job.xi * len(servers[i])
            rate[i] = 1.0 / tau
            version[i] += 1
            heapq.heappush(events, (now + max(left[i], 0.0) / rate[i], int(version[i]), i))

    def begin(i: int) -> None:
        start[i], stamp[i] = now, now
        running.add(i)
        if multi[i]:
            for s in servers[i].tolist():
                on_server.setdefault(s, set()).add(i)

    for i in range(n):
        if waiting_on[i] == 0:
            begin(i)
    rerate()
    while events:
        t, ver, i = heapq.heappop(events)
        if ver != version[i] or i not in running:
            continue
        now = t
        running.discard(i)
        end[i] = now
        if multi[i]:
            for s in servers[i].tolist():
                on_server[s].discard(i)
        for nxt in after[i]:
            waiting_on[nxt] -= 1
            if waiting_on[nxt] == 0:
                begin(nxt)
        rerate()
    return start, end


def run_rar(mix: RarMix, policy: RarPolicy, seed: int = 1) -> tuple[JobsResult, Plan]:
    t0 = time.perf_counter()
    planner = Planner(mix, policy, seed)
    plan = planner.plan()
    planned = time.perf_counter() - t0
    start, end = execute(mix, plan, planner.server_of)
    if np.isnan(end).any():  # a bug: every job's predecessors end
        raise RuntimeError(f"{policy.name}: jobs never ran")
    busy = np.zeros(mix.gpus)
    for i, g in enumerate(plan.gpus):
        busy[g] += end[i] - start[i]
    makespan = float(end.max())
    rows = [
        {
            "job": j.id, "model": "-", "gpus": j.gpus, "iterations": j.iterations,
            "arrival": 0.0, "placed": float(start[i]), "end": float(end[i]),
            "jct": float(end[i]), "servers": int(len(np.unique(planner.server_of[plan.gpus[i]]))),
        }
        for i, j in enumerate(mix.jobs)
    ]  # fmt: skip
    util = busy / makespan
    summary = {
        "avg_jct": float(end.mean()),
        "median_jct": float(np.median(end)),
        "p95_jct": float(np.percentile(end, 95)),
        "makespan": makespan,
        "estimated_makespan": plan.est_makespan,
        "theta": plan.theta,
        "kappa": plan.kappa,
        "lambda": planner.lam,
        "avg_gpu_utilization": float(util.mean()),
        "multi_server_jobs": int(sum(r["servers"] > 1 for r in rows)),
        "planning_seconds": planned,
        "seconds": time.perf_counter() - t0,
    }
    return JobsResult(policy.name, "gang", rows, summary, util.tolist()), plan
