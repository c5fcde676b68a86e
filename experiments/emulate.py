"""``grouper emulate``: the whole system on an emulated leaf-spine, policy by policy."""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

from grouper.common.cluster_config import SchedulingConfig
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.output import table, write_json
from grouper.common.scheduling import POLICIES
from grouper.experiments.cpustats import STEAL_WARNING
from grouper.experiments.emulate_torch import emulate_torch
from grouper.experiments.emulation import Emulation
from grouper.experiments.intervals import paired_ratios
from grouper.experiments.spec import emulation_queues, load_experiment, parse_policies, spec_of
from grouper.experiments.tcpstats import total
from grouper.simulator import report
from grouper.simulator.run import link_goodput, run_policies, topology_of
from grouper.topologies import congestion
from grouper.topologies.leafspine import PAYLOAD_SHARE, LeafSpine
from grouper.workloads.model import Workload


def emulate(args: object) -> int:
    torch = args.experiment.startswith("builtin:torch-")
    policies = [] if torch else parse_policies(args.policies, POLICIES)  # before root
    if os.geteuid() != 0:
        raise ConfigError("emulate", "needs root (Mininet, namespaces, qdiscs)")
    if not shutil.which("mnexec"):
        raise ConfigError("emulate", "Mininet is not installed (apt-get install mininet)")
    if torch:
        return emulate_torch(args)
    wl = load_experiment(args.experiment)
    queues = emulation_queues(args)
    congestion.check(args.cc)
    spec = replace(spec_of(wl, queues), host_backend=args.backend, cc=args.cc)
    out = Path(args.out or f"results/emulate/{wl.name}").resolve()
    runs: dict[str, list[dict]] = {p: [] for p in policies}
    for i in range(args.runs):  # interleaved, so a slow spell of the VM hits every policy
        for p in policies:
            work = out / (p if args.runs == 1 else f"{p}-{i + 1}")
            runs[p].append(_measure(spec, p, args.period, work, wl))
    measured = {p: merge_runs(runs[p]) for p in policies}
    calibrated = bool(args.config)
    if not calibrated:  # payload can never move at the frames' rate: headers ride along
        wl = replace(wl, goodput=min(wl.goodput, PAYLOAD_SHARE))
    # the replay runs a ring's 2(W-1) steps with a barrier after each: predict that
    wl = replace(wl, ring_mode="steps")
    sim = run_policies(
        wl, policies, period=args.period, queues=queues, progress=False, calibrated=calibrated,
        keep_within=SchedulingConfig.keep_order_within,  # the emulated cluster's planner
    )  # fmt: skip
    model = queues.admission or ContentionModel()
    results = {p: _compare(measured[p], sim[p]) for p in policies}
    png = report.plot_normalized(
        {p: {k: results[p][k] for k in ("avg_sct", "avg_jct", "avg_slowdown")} for p in policies},
        out / "normalized.png",
        f"emulated {wl.name}",
    )
    result = {
        "experiment": wl.name,
        "period": args.period,
        "runs": args.runs,
        "link_mbps": spec.mbps,
        "congestion_control": spec.cc,
        "link_delay_ms": 0.0,  # this kernel has no netem: links add no propagation delay
        "uplink_mbps": spec.fabric_mbps,
        "topology": spec.simulator_topology(),
        # what the prediction assumed: constants (as calibrated with --config) and the
        # share of link rates payload moves at
        "admission": {"a": model.a, "b": model.b, "eta": model.eta},
        "goodput": link_goodput(wl, model, topology_of(wl, 0), calibrated),
        "workload_meta": wl.meta,  # generated builtins: seed and scale factors
        # run i of each policy against run i of fs (the runs are interleaved)
        "ratios": paired_ratios({p: [r["avg_sct"] for r in runs[p]] for p in policies}),
        "results": results,
        "files": [str(png)],
    }
    write_json(result, args.json)
    if args.json != "-":
        _print_results(results)
        print(f"files in {out}/")
    return 0


def _measure(spec: LeafSpine, policy: str, period: float, work: Path, wl: Workload) -> dict:
    """One policy's emulated run: its stage and job times, bytes, TCP counters and the
    CPU the hypervisor took meanwhile."""
    em = Emulation(spec, policy, period, work)
    try:
        em.start()
        run = asyncio.run(em.run(wl))
    finally:
        em.stop()
    r = run.replay
    if r.errors:
        raise RuntimeError(f"{policy}: " + "; ".join(r.errors))
    sct = [s["sct"] for s in r.stages]
    jct = [j["jct"] for j in r.jobs]
    return {
        "avg_sct": sum(sct) / len(sct),
        "avg_jct": sum(jct) / len(jct),
        "stages": len(sct),
        "stage_times": r.stages,
        "bytes": sum(r.ledger.received.values()),
        "bytes_missing": 0,
        "band_bytes": run.band_bytes,
        "tcp": total(run.tcp),  # summed over hosts: what the fluid model does not see
        "cpu_steal": run.cpu_steal,  # a VM's hypervisor slows runs (cpustats.py)
        "congestion_control": em.host_cc,  # each host's, as its namespace said
        "connections": em.connections,  # each one's spine and TCP state (connections.py)
    }


def merge_runs(runs: list[dict]) -> dict:
    """A policy's runs as one: every time is the mean over runs (each stage's too, with
    its runs beside it), TCP counters are per run, and steal is the mean and the worst
    second of any run. One run is returned as it is."""
    if len(runs) == 1:
        return runs[0]
    scts = [r["avg_sct"] for r in runs]
    by_run = [{(s["cojob"], s["stage"]): s for s in r["stage_times"]} for r in runs]
    stages = []
    for key in by_run[0]:  # in the first run's order of stage ends
        same = [b[key] for b in by_run]
        stages.append({
            "cojob": key[0],
            "stage": key[1],
            "sct": statistics.mean(s["sct"] for s in same),
            "duration": statistics.mean(s["duration"] for s in same),
            "sct_runs": [s["sct"] for s in same],
        })  # fmt: skip
    return {
        "avg_sct": statistics.mean(scts),
        "avg_sct_min": min(scts),
        "avg_sct_max": max(scts),
        "avg_sct_runs": scts,
        "avg_jct": statistics.mean(r["avg_jct"] for r in runs),
        "stages": runs[0]["stages"],
        "stage_times": stages,
        "bytes": statistics.mean(r["bytes"] for r in runs),
        "bytes_missing": 0,
        "band_bytes": runs[0]["band_bytes"],
        "tcp": {k: statistics.mean(r["tcp"][k] for r in runs) for k in runs[0]["tcp"]},
        "cpu_steal": {
            "mean": statistics.mean(r["cpu_steal"]["mean"] for r in runs),
            "max": max(r["cpu_steal"]["max"] for r in runs),
        },
        "runs": runs,
    }


def _compare(m: dict, sim: object) -> dict:
    """A policy's measured run beside the simulator's prediction of it."""
    pred = sim.summary["avg_sct"]
    # slowdown: measured stage duration over the stage's duration alone, as the
    # simulator computes it on the same topology (no emulated run alone)
    alone = {(s["cojob"], s["stage"]): s["alone"] for s in sim.result.stages}
    predicted = {(s["cojob"], s["stage"]): s["sct"] for s in sim.result.stages}
    stages = [
        {**s, "predicted_sct": predicted.get((s["cojob"], s["stage"]))} for s in m["stage_times"]
    ]
    slow = [
        s["duration"] / alone[(s["cojob"], s["stage"])]
        for s in m["stage_times"]
        if alone.get((s["cojob"], s["stage"]))
    ]
    return {
        **m,
        "stage_times": stages,  # each beside the simulator's SCT of that stage
        "avg_slowdown": sum(slow) / len(slow) if slow else None,
        "predicted_avg_sct": pred,
        "prediction_error": (pred - m["avg_sct"]) / m["avg_sct"],
    }


def _print_results(results: dict[str, dict]) -> None:
    base = results.get("fs", {}).get("avg_sct")
    rows = [
        [
            p,
            f"{r['avg_sct']:.2f}"
            + (f" [{r['avg_sct_min']:.2f}-{r['avg_sct_max']:.2f}]" if "runs" in r else ""),
            f"{r['avg_sct'] / base:.3f}" if base else "-",
            f"{r['predicted_avg_sct']:.2f}",
            f"{r['prediction_error']:+.1%}",
            f"{r['avg_jct']:.2f}",
            f"{r['tcp']['timeouts']:.0f}",
            f"{r['tcp']['segments_retransmitted']:.0f}",
            f"{r['cpu_steal']['mean']:.0%} ({r['cpu_steal']['max']:.0%})",
        ]
        for p, r in results.items()
    ]
    ranged = any("runs" in r for r in results.values())
    heads = ["policy", "avg SCT (s)" + (" [range]" if ranged else ""), "/ fs", "simulated"]
    heads += ["sim error", "avg JCT (s)", "TCP timeouts", "segments resent"]
    print(table(rows, [*heads, "CPU stolen (worst s)"]))
    for p, r in results.items():
        for i, run in enumerate(r.get("runs", [r])):
            if run["cpu_steal"]["mean"] > STEAL_WARNING:
                which = f" run {i + 1}" if "runs" in r else ""
                print(
                    f"warning: {p}{which}: the hypervisor took {run['cpu_steal']['mean']:.0%} "
                    "of the CPU during it; rerun it before trusting its times"
                )
