"""Implementations of the scheduling subcommands (``order``, ``lower-bound``)."""

from __future__ import annotations

import time

from grouper.common.errors import ConfigError
from grouper.common.output import table, write_json
from grouper.common.queues import QueueConfig
from grouper.common.scheduling import POLICIES
from grouper.pda.lowerbound import lp_lower_bound
from grouper.pda.policies import host_plans, schedule
from grouper.pda.snapshot import Snapshot, build_snapshot
from grouper.workloads import Workload, load_workload


def order(workload: str, policy: str, online: bool, json_path: str | None) -> int:
    """Order a static workload. Jobs' declared stage counts are used unless ``online``
    (then every job is assumed to run all stages, as the online coordinator does)."""
    if policy not in POLICIES:
        raise ConfigError("--policy", f"must be one of {', '.join(POLICIES)}; got {policy!r}")
    wl = load_workload(workload)
    snap = build_snapshot(wl.cojobs, wl.hosts, known_survivors=not online)
    sched = schedule(snap, policy)
    cfg = QueueConfig()
    plans = host_plans(snap, sched, cfg)
    result = {
        "workload": wl.name,
        "policy": policy,
        "online": online,
        "unit": sched.unit_kind,
        "order": sched.ordered_ids(),
        "queues": {
            "count": cfg.queues,
            "reserved": list(cfg.reserved),
            "scavenger": cfg.scavenger_band,
            "dscp": list(cfg.dscp_table),
        },
        "hosts": plans,
    }
    if json_path is not None:
        write_json(result, json_path)
        if json_path == "-":
            return 0
    print(f"{policy} order ({sched.unit_kind}s): {', '.join(result['order']) or '(none)'}")
    rows = [
        [h, f["cojob"], f["job"], f["stage"], f["dst"], f["band"], f["dscp"]]
        for h, plan in plans.items()
        for f in plan["flows"]
    ]
    print(table(rows, ["host", "cojob", "job", "stage", "to", "band", "dscp"]))
    return 0


def lower_bound(workload: str, json_path: str | None, seconds: float | None = None) -> int:
    """``seconds`` counts from the command's start, loading included."""
    started = time.monotonic()
    wl = load_workload(workload)
    snap = build_snapshot(wl.cojobs, wl.hosts, known_survivors=True)
    if seconds is not None:
        seconds = max(seconds - (time.monotonic() - started), 0.0)
    try:
        lb = lp_lower_bound(
            snap, capacity=wl.capacity, released=_released(wl, snap), seconds=seconds
        )
    except (RuntimeError, ValueError) as exc:  # the solver gave up: say so in one line
        raise ConfigError("workload", f"no lower bound for {wl.name}: {exc}") from None
    n = len(snap.stage_ids)
    result = {
        "workload": wl.name,
        "time_unit": wl.time_unit,
        "stages": n,
        "sum_sct_lower_bound": lb.value,
        "avg_sct_lower_bound": lb.value / n if n else 0.0,
        "lp_rounds": lb.rounds,
        "lp_cuts": lb.cuts,
        "converged": lb.converged,
    }
    write_json(result, json_path)
    if json_path != "-":
        print(
            f"LP lower bound on average SCT: {result['avg_sct_lower_bound']:.4g} "
            f"{wl.time_unit} ({n} stages, {lb.rounds} rounds, {lb.cuts} cuts"
            + ("" if lb.converged else "; stopped early: a valid but weaker bound")
            + ")"
        )
    return 0


def _released(wl: Workload, snap: Snapshot) -> dict[int, int]:
    """Cojob index -> row of the stage whose completion releases it (``release_after``)."""
    rows = snap.stage_index()
    out = {}
    for cid, (trigger, k) in wl.release_after.items():
        row = rows.get(f"{trigger}/{k}")
        if row is None:
            raise ConfigError(
                f"release_after.{cid}", f"stage {k} of {trigger!r} is not in the workload"
            )
        out[snap.cojob_ids.index(cid)] = row
    return out
