"""``grouper emulate`` for the real-framework experiments (``builtin:torch-*``)."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from grouper.common.cluster_config import SchedulingConfig
from grouper.common.output import table, write_json
from grouper.common.queues import QueueConfig
from grouper.experiments.intervals import mean_ci95, paired_ratios
from grouper.experiments.spec import emulation_queues, parse_policies, spec_of
from grouper.experiments.torch_experiment import (
    check_known,
    load_torch_experiment,
    run_policy,
    simulator_workload,
)
from grouper.simulator.run import run_policies
from grouper.topologies import congestion
from grouper.workloads import load_workload

POLICIES = ("fs", "grouper", "baraat", "sincronia", "sptf")


def emulate_torch(args: Any) -> int:
    check_known(args.experiment)
    policies = parse_policies(args.policies, POLICIES)
    exp = load_torch_experiment(args.experiment)
    queues = emulation_queues(args)
    wl_topology = load_workload("builtin:small")  # the same fabric spec
    congestion.check(args.cc)
    spec = replace(spec_of(wl_topology, queues), cc=args.cc)
    out = Path(args.out or f"results/emulate/{exp.name}").resolve()
    runs: dict[str, list[dict]] = {p: [] for p in policies}
    for i in range(args.runs):
        for p in policies:
            runs[p].append(run_policy(exp, spec, p, args.period, out / f"{p}-{i + 1}"))
    calibrated = bool(args.config)
    results = {p: _summary(exp, runs[p], p, args.period, queues, calibrated) for p in policies}
    ratios = paired_ratios({p: results[p]["avg_sct_runs"] for p in policies})
    write_json({"experiment": exp.name, "period": args.period, "runs": args.runs,
                "congestion_control": spec.cc, "link_delay_ms": 0.0, "ratios": ratios,
                "results": results}, args.json)  # fmt: skip
    if args.json != "-":
        rows = [
            [
                p,
                f"{r['avg_sct']:.2f} [{r['avg_sct_min']:.2f}-{r['avg_sct_max']:.2f}]",
                _ratio(ratios.get(f"{p}/fs")),
                f"{r['predicted_avg_sct']:.2f}",
                f"{r['prediction_error']:+.1%}",
                f"{r['avg_jct']:.2f}",
                "-" if r["min_band_share"] is None else f"{r['min_band_share']:.1%}",
            ]
            for p, r in results.items()
        ]
        head = ["policy", "avg SCT (s) [range]", "/ fs (paired, 95%)", "simulated", "sim error",
                "avg JCT (s)", "min band share"]  # fmt: skip
        print(f"congestion control {spec.cc}, no link delay")
        print(table(rows, head))
        print(f"files in {out}/")
    return 0


def _summary(
    exp: Any, runs: list[dict], policy: str, period: float, queues: QueueConfig, calibrated: bool
) -> dict:
    scts = [statistics.mean(s["sct"] for s in r["stages"]) for r in runs]
    jcts = [statistics.mean(j["jct"] for j in r["jobs"]) for r in runs]
    path = simulator_workload(exp, runs[0])
    try:
        sim = run_policies(load_workload(str(path)), [policy], period=period, queues=queues,
                           progress=False, calibrated=calibrated,
                           keep_within=SchedulingConfig.keep_order_within)  # fmt: skip
    finally:
        path.unlink()
    pred = sim[policy].summary["avg_sct"]
    shares = {k: v for r in runs for k, v in r["band_share"].items()}
    per_job = [v for v in shares.values() if v is not None]
    avg = statistics.mean(scts)
    return {
        "avg_sct": avg,
        "avg_sct_min": min(scts),
        "avg_sct_max": max(scts),
        "avg_sct_runs": scts,
        "avg_jct": statistics.mean(jcts),
        "predicted_avg_sct": pred,
        "prediction_error": (pred - avg) / avg,
        "band_share": {k: shares[k] for k in sorted(shares)} if policy != "fs" else {},
        "min_band_share": min(per_job) if per_job and policy != "fs" else None,
        "avg_sct_ci95": mean_ci95(scts)["ci95"],
        "stage_times": [r["stages"] for r in runs],
        "pruned": [{f"{c}/{j}": n for (c, j), n in r["ran"].items()} for r in runs],
        "congestion_control": [r["congestion_control"] for r in runs],
        "connections": [r["connections"] for r in runs],
    }


def _ratio(r: dict | None) -> str:
    if r is None:
        return "-"
    return f"{r['mean']:.3f}" + (f" +- {r['ci95']:.3f}" if r["ci95"] is not None else "")
