"""``grouper emulate``: the whole system on an emulated leaf-spine, policy by policy."""

from __future__ import annotations

import asyncio
import os
import shutil
from dataclasses import replace
from pathlib import Path

from common.errors import ConfigError
from common.output import table, write_json
from pda.admission import ContentionModel
from pda.priorities import QueueConfig
from simulator import report
from simulator.run import link_goodput, run_policies, topology_of
from topologies.experiment import Emulation
from topologies.leafspine import PAYLOAD_SHARE, LeafSpine
from topologies.tcpstats import total
from workloads import load_workload
from workloads.schema import Workload
from workloads.topology import leafspine_args

EXPERIMENTS = ("small", "testbed-mini")


def spec_of(wl: Workload, queues: QueueConfig) -> LeafSpine:
    kind, _, arg = (wl.topology or "").partition(":")
    try:
        if kind != "leafspine":
            raise ValueError(kind)
        a = leafspine_args(arg)
        if a.total is not None:
            raise ValueError(arg)
    except ValueError:
        raise ConfigError(
            "topology", "an experiment needs topology: leafspine:L,S,H,GBPS[,uplink=GBPS]"
        ) from None
    uplink = a.uplink_gbps * 1000 if a.uplink_gbps is not None else None
    return LeafSpine(a.leaves, a.spines, a.per_leaf, a.gbps * 1000, queues, uplink)


def emulation_queues(args: object) -> QueueConfig:
    """The emulated cluster's queues: ``--min-share``, and with ``--config`` the
    contention constants measured on this fabric (``grouper calibrate --write``)."""
    queues = QueueConfig(min_share=args.min_share)
    if getattr(args, "config", None):
        from grouper.cluster_config import load_cluster_config

        queues = replace(queues, admission=load_cluster_config(args.config).queues.admission)
    return queues


def load_experiment(name: str) -> Workload:
    if name.startswith("builtin:"):
        key = name.split(":", 1)[1]
        if key not in EXPERIMENTS:
            raise ConfigError(
                "--experiment", f"unknown builtin {key!r} (known: {', '.join(EXPERIMENTS)})"
            )
    return load_workload(name)


def emulate(args: object) -> int:
    if os.geteuid() != 0:
        raise ConfigError("emulate", "needs root (Mininet, namespaces, qdiscs)")
    if not shutil.which("mnexec"):
        raise ConfigError("emulate", "Mininet is not installed (apt-get install mininet)")
    if args.experiment.startswith("builtin:torch-"):
        from topologies.torch_commands import emulate_torch

        return emulate_torch(args)
    policies = [p for p in args.policies.split(",") if p]
    wl = load_experiment(args.experiment)
    queues = emulation_queues(args)
    spec = spec_of(wl, queues)
    out = Path(args.out or f"results/emulate/{wl.name}")
    period = args.period
    measured, bands, tcp = {}, {}, {}
    for policy in policies:
        em = Emulation(spec, policy, period, out / policy)
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
        measured[policy] = {
            "avg_sct": sum(sct) / len(sct),
            "avg_jct": sum(jct) / len(jct),
            "stages": len(sct),
            "stage_times": r.stages,
            "bytes": sum(r.ledger.received.values()),
            "bytes_missing": 0,
        }
        bands[policy] = run.band_bytes
        tcp[policy] = total(run.tcp)
    calibrated = bool(args.config)
    if not calibrated:  # payload can never move at the frames' rate: headers ride along
        wl = replace(wl, goodput=min(wl.goodput, PAYLOAD_SHARE))
    # the replay runs a ring's 2(W-1) steps with a barrier after each: predict that
    wl = replace(wl, ring_mode="steps")
    sim = run_policies(
        wl, policies, period=period, queues=queues, progress=False, calibrated=calibrated
    )
    model = queues.admission or ContentionModel()
    goodput = link_goodput(wl, model, topology_of(wl, 0), calibrated)
    results = {}
    for p in policies:
        pred = sim[p].summary["avg_sct"]
        m = measured[p]
        # slowdown: measured stage duration over the stage's duration alone, as the
        # simulator computes it on the same topology (no emulated run alone)
        alone = {(s["cojob"], s["stage"]): s["alone"] for s in sim[p].result.stages}
        slow = [
            s["duration"] / alone[(s["cojob"], s["stage"])]
            for s in m["stage_times"]
            if alone.get((s["cojob"], s["stage"]))
        ]
        results[p] = {
            **m,
            "avg_slowdown": sum(slow) / len(slow) if slow else None,
            "predicted_avg_sct": pred,
            "prediction_error": (pred - m["avg_sct"]) / m["avg_sct"],
            "band_bytes": bands[p],
            "tcp": tcp[p],  # summed over hosts: what the fluid model does not see
        }
    png = report.plot_normalized(
        {p: {k: results[p][k] for k in ("avg_sct", "avg_jct", "avg_slowdown")} for p in policies},
        out / "normalized.png",
        f"emulated {wl.name}",
    )
    result = {
        "experiment": wl.name,
        "period": period,
        "link_mbps": spec.mbps,
        "uplink_mbps": spec.fabric_mbps,
        "topology": spec.simulator_topology(),
        # what the prediction assumed: constants (as calibrated with --config) and the
        # share of link rates payload moves at
        "admission": {"a": model.a, "b": model.b, "eta": model.eta},
        "goodput": goodput,
        "workload_meta": wl.meta,  # generated builtins: seed and scale factors
        "results": results,
        "files": [str(png)],
    }
    write_json(result, args.json)
    if args.json != "-":
        base = results.get("fs", {}).get("avg_sct")
        rows = [
            [
                p,
                f"{r['avg_sct']:.2f}",
                f"{r['avg_sct'] / base:.3f}" if base else "-",
                f"{r['predicted_avg_sct']:.2f}",
                f"{r['prediction_error']:+.1%}",
                f"{r['avg_jct']:.2f}",
                f"{r['tcp']['timeouts']}",
                f"{r['tcp']['segments_retransmitted']}",
            ]
            for p, r in results.items()
        ]
        heads = ["policy", "avg SCT (s)", "/ fs", "simulated", "sim error", "avg JCT (s)"]
        print(table(rows, [*heads, "TCP timeouts", "segments resent"]))
        print(f"files in {out}/")
    return 0
