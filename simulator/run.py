"""Run policies on a workload and compute the result contract of DESIGN.md.

SCT of a stage = its completion time minus its cojob's arrival; JCT of a job = the
time it ends (finished or killed) minus its cojob's arrival; slowdown of a stage = its
duration divided by its duration when its cojob runs alone on the same topology
(simulated once per cojob, with the same placement).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.common.scheduling import POLICIES
from grouper.pda.planning import STEADY_POLICIES
from grouper.simulator.engine import Engine
from grouper.simulator.fast import FastEngine, coflow_shaped
from grouper.simulator.fast_flows import FlowFastEngine
from grouper.simulator.limits import RunLimits
from grouper.simulator.state import SimResult
from grouper.workloads.schema import Workload
from grouper.workloads.topology import Topology, bigswitch, parse_topology

SIM_POLICIES = (*POLICIES, "grouper-noadmit", "grouper-infinite")


@dataclass
class PolicyRun:
    result: SimResult
    summary: dict
    seconds: float


def topology_of(wl: Workload, seed: int = 0) -> Topology:
    if wl.topology is None:
        return bigswitch(list(wl.hosts), wl.capacity)
    return parse_topology(wl.topology, capacity=wl.capacity, seed=seed, hosts=wl.hosts)


def goodput_of(model: ContentionModel, topo: Topology) -> float:
    """The share of a host link's rate that payload moves at, as measured: one transfer
    of M bytes between two hosts takes a + b M (Wang et al., Eq. 2), so 1 / b over the
    host link's rate (at most 1). Wang et al.'s 10 GbE constants give 0.94."""
    host = float(np.median(topo.capacity[: 2 * len(topo.hosts)]))
    return min(1.0, 1.0 / (model.b * host))


def link_goodput(wl: Workload, model: ContentionModel, topo: Topology, calibrated: bool) -> float:
    """What the runs move payload at: the calibrated goodput, else the workload's."""
    return goodput_of(model, topo) if calibrated else wl.goodput


def engine_for(
    wl: Workload,
    policy: str,
    topo: Topology,
    period: float,
    queues: QueueConfig,
    contention: float = 0.0,
    keep_within: float = 0.0,
    progress_step: float = 0.0,
) -> Engine | FastEngine | FlowFastEngine:
    """The policy's engine: the fast path for coflow-shaped workloads (same results,
    ``tests/unit/test_fast_simulator.py``; flow by flow with the contention penalty on),
    the general engine otherwise."""
    base = policy
    unlimited = False
    if policy == "grouper-noadmit":
        base, queues = "grouper", replace(queues, admission=None)
    elif policy == "grouper-infinite":
        base, unlimited = "grouper", True
    shaped = coflow_shaped(wl.cojobs, topo, period, wl.release_after, wl.ring_mode == "steps")
    # the fast path orders afresh every time, as the planner does at keep_within 0 and
    # for the policies whose orders it never keeps
    # (and sees progress exactly: a coflow's job is one iteration)
    exact = progress_step == 0
    if shaped and exact and (keep_within == 0 or base not in STEADY_POLICIES):
        local = wl.local_traffic == "ports"
        if contention > 0:
            return FlowFastEngine(
                list(wl.cojobs), topo, base, queues=queues, unlimited=unlimited,
                contention=contention, local_on_ports=local,
            )  # fmt: skip
        return FastEngine(
            list(wl.cojobs), topo, base, queues=queues, unlimited=unlimited, local_on_ports=local
        )
    return Engine(
        list(wl.cojobs),
        topo,
        base,
        queues=queues,
        period=period,
        unlimited=unlimited,
        release_after=wl.release_after,
        contention=contention,
        ps_overlap=wl.ps_mode == "overlap",
        ring_steps=wl.ring_mode == "steps",
        local_on_ports=wl.local_traffic == "ports",
        keep_within=keep_within,
        progress_step=progress_step,
    )


def alone_durations(
    wl: Workload, topo: Topology, contention: float = 0.0, limits: RunLimits | None = None
) -> dict[tuple[str, int], float]:
    limits = limits or RunLimits()
    out = {}
    for cj in wl.cojobs:
        single = replace(wl, cojobs=(replace(cj, arrival=0.0),), release_after={})
        r = engine_for(single, "fs", topo, 0.0, QueueConfig(), contention).run(
            max_time=limits.max_time, deadline=limits.deadline
        )
        for s in r.stages:
            out[(s["cojob"], s["stage"])] = s["duration"]
    return out


def summarize(r: SimResult, alone: dict[tuple[str, int], float]) -> dict:
    sct = np.asarray([s["sct"] for s in r.stages])
    weight = np.asarray([s["weight"] for s in r.stages])
    jct = np.asarray([j["jct"] for j in r.jobs if math.isfinite(j["jct"])])
    for s in r.stages:
        base = alone.get((s["cojob"], s["stage"]))
        s["alone"] = base
        s["slowdown"] = s["duration"] / base if base else math.nan
    slow = np.asarray([s["slowdown"] for s in r.stages if math.isfinite(s["slowdown"])])
    return {
        "avg_sct": float(sct.mean()) if len(sct) else math.nan,
        "avg_weighted_sct": float(np.average(sct, weights=weight)) if len(sct) else math.nan,
        "avg_jct": float(jct.mean()) if len(jct) else math.nan,
        "avg_slowdown": float(slow.mean()) if len(slow) else math.nan,
        "p95_slowdown": float(np.percentile(slow, 95)) if len(slow) else math.nan,
        "stages": len(r.stages),
        "jobs": len(r.jobs),
        "events": r.events,
        "reschedules": r.reschedules,
        # rates where the rounds did not settle (a priority cycle): the worst-queue fallback's
        "allocations": r.allocations,
        "fallbacks": r.fallbacks,
    }


def run_policies(
    wl: Workload,
    policies: list[str],
    *,
    period: float | None = None,
    queues: QueueConfig | None = None,
    seed: int = 0,
    contention: bool = True,
    progress: bool = True,
    calibrated: bool = False,
    limits: RunLimits | None = None,
    keep_within: float = 0.0,
    progress_step: float = 0.0,
) -> dict[str, PolicyRun]:
    """Run every policy on ``wl``. Links follow the workload's contention model
    (``model.contention``: Eq. 5 with the admission parameters b and eta, or ideal
    sharing); ``contention=False`` forces ideal sharing. Queues come from ``queues``,
    else the workload's ``scheduling`` section, else the defaults. Links move payload
    at ``model.goodput`` of their rate or, ``calibrated`` (the admission constants were
    measured on this network), at the goodput those constants imply. ``keep_within`` is
    the planner's (``scheduling.keep_order_within`` of a cluster); with ``progress_step``
    it sees progress as agents report it (``scheduling.progress_step``)."""
    for p in policies:
        if p not in SIM_POLICIES:
            raise ConfigError(
                "--policies", f"unknown policy {p!r} (known: {', '.join(SIM_POLICIES)})"
            )
    queues = queues or wl.queues or QueueConfig(admission=ContentionModel())
    topo = topology_of(wl, seed)
    period = wl.period if period is None else period
    model = queues.admission or ContentionModel()
    topo.capacity = topo.capacity * link_goodput(wl, model, topo, calibrated)
    penalty = model.eta / model.b if contention and wl.contention == "wang" else 0.0
    limits = limits or RunLimits()
    alone = alone_durations(wl, topo, penalty, limits)
    out = {}
    from tqdm import tqdm

    bar = tqdm(policies, unit="policy", desc="simulate", disable=None if progress else True)
    for p in bar:
        bar.set_postfix_str(p)
        t0 = time.perf_counter()
        r = engine_for(wl, p, topo, period, queues, penalty, keep_within, progress_step).run(
            max_time=limits.max_time, deadline=limits.deadline
        )
        out[p] = PolicyRun(r, summarize(r, alone), time.perf_counter() - t0)
    return out


# three ports, two coflows: enough to reach every kernel of both coflow engines
WARM_TRACE = "3 2\n1 0 2 0 1 1 2:1.0\n2 0 1 2 2 0:1.0 1:2.0\n"


def warm_up() -> None:
    """Compile the coflow engines' kernels into numba's disk cache now (about 40 s the
    first time on the 2-core VM, then a load) rather than in the first trace simulated:
    a tiny trace through both (``make setup`` runs it)."""
    from grouper.workloads.coflow_trace import parse_coflow_trace, trace_workload

    wl = trace_workload(parse_coflow_trace(WARM_TRACE))
    topo = topology_of(wl)
    for contention in (0.0, 0.5):  # FastEngine, then FlowFastEngine
        engine_for(wl, "grouper", topo, 0.0, QueueConfig(), contention).run()
