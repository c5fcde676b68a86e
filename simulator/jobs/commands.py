"""``grouper simulate --mode jobs``: placements x all-reduce schedulers on a job mix."""

from __future__ import annotations

import csv
import dataclasses
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from grouper.common.errors import ConfigError
from grouper.common.output import table, write_json
from grouper.simulator.commands import cluster_queues
from grouper.simulator.jobs import plots
from grouper.simulator.jobs.engine import JobsResult
from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.rar_engine import run_rar
from grouper.simulator.jobs.rules import Rules, parse_rules
from grouper.simulator.jobs.run import run_jobs
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.simulator.jobs.sjfbco import parse_rar_policy
from grouper.workloads.jobmix import JobMix, load_jobmix
from grouper.workloads.rarmix import RarMix

JOB_FIELDS = ["run", "job", "model", "gpus", "iterations", "arrival", "placed", "end", "jct",
              "servers"]  # fmt: skip


def _list(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise ConfigError(what, "name at least one")
    if len(set(items)) != len(items):
        raise ConfigError(what, f"names one twice: {text!r}")
    return items


def _one(task: tuple) -> JobsResult:
    return _simulate(*task)


def _simulate(
    mix: JobMix | RarMix, placement: str, scheduler: str, seed: int, rules: Rules | None = None
) -> JobsResult:
    if isinstance(mix, RarMix):
        return run_rar(mix, parse_rar_policy(placement), seed)[0]
    return run_jobs(mix, parse_placement(placement), parse_scheduler(scheduler), seed, rules)


def _rules(args: object) -> Rules:
    poll = bool(getattr(args, "reference_poll", False))
    return parse_rules(getattr(args, "rules", None), reference_poll=poll)


def simulate_jobs_cmd(args: object) -> int:
    spec = args.workload or "builtin:wang-64gpu"
    params = {"seed": args.seed} if spec.startswith("builtin:") else {}
    mix = load_jobmix(spec, **params)
    if isinstance(mix, RarMix):
        if (
            args.scheduler is not None
            or args.hold_gpus
            or args.iteration_batch is not None
            or _rules(args) != Rules()
        ):
            raise ConfigError(
                "--scheduler", "Yu et al.'s batches are gang-scheduled by the placement's plan"
            )
        placements = _list(args.placement or "sjf-bco,ff,ls,rand", "--placement")
        schedulers = ["gang"]
        for p in placements:
            parse_rar_policy(p)
        return _report(mix, _run_all(mix, placements, schedulers, args), args)
    placements = _list(args.placement or "lwf:1", "--placement")
    schedulers = _list(args.scheduler or "ada-srsf", "--scheduler")
    for p in placements:
        parse_placement(p)
    for s in schedulers:
        parse_scheduler(s)
    rules = _rules(args)
    if rules.tasks == "code" and (args.hold_gpus or mix.hold_gpus):
        raise ConfigError("--rules", "tasks=code does not combine with --hold-gpus")
    queues = cluster_queues(args)
    if queues is not None and queues.admission is not None:  # e.g. calibrated constants
        mix = dataclasses.replace(mix, contention=queues.admission)
    if args.iteration_batch is not None:
        mix = dataclasses.replace(mix, iteration_batch=args.iteration_batch)
    if args.hold_gpus:
        mix = dataclasses.replace(mix, hold_gpus=True)
    return _report(mix, _run_all(mix, placements, schedulers, args, rules), args, rules)


def _report(
    mix: JobMix | RarMix, runs: list[JobsResult], args: object, rules: Rules | None = None
) -> int:
    out = Path(args.out or f"results/simulate-jobs/{mix.name}")
    files = _write(runs, out, mix)
    result = {
        "workload": mix.name,
        "mode": "jobs",
        "params": mix.meta,
        "jobs": len(mix.jobs),
        **_setting(mix),
        **({"rules": dataclasses.asdict(rules)} if rules is not None else {}),
        "results": {f"{r.placement}/{r.scheduler}": r.summary for r in runs},
        "files": files,
    }
    write_json(result, args.json)
    if args.json != "-":
        rows = [
            [
                r.placement,
                r.scheduler,
                f"{r.summary['avg_gpu_utilization'] * 100:.2f}%",
                f"{r.summary['avg_jct']:.1f}",
                f"{r.summary['median_jct']:.1f}",
                f"{r.summary['p95_jct']:.1f}",
                f"{r.summary['makespan']:.0f}",
                f"{r.summary['seconds']:.1f}",
            ]
            for r in runs
        ]
        header = ["placement", "scheduler", "avg GPU util", "avg JCT (s)", "median JCT",
                  "95th JCT", "makespan", "run s"]  # fmt: skip
        print(table(rows, header))
        print(f"files in {out}/")
    return 0


def _setting(mix: JobMix | RarMix) -> dict:
    if isinstance(mix, RarMix):
        return {"model": "yu", "servers": list(mix.servers), "lambda": mix.lam}
    c, m = mix.cluster, mix.contention
    return {
        "model": "wang",
        "cluster": {
            "servers": c.servers,
            "gpus_per_server": c.gpus_per_server,
            "gpu_memory_mb": c.gpu_memory_mb,
        },
        "contention": {"a": m.a, "b": m.b, "eta": m.eta},
        "iteration_batch": mix.iteration_batch,
        "hold_gpus": mix.hold_gpus,
    }


def _run_all(
    mix: JobMix | RarMix,
    placements: list[str],
    schedulers: list[str],
    args: object,
    rules: Rules | None = None,
) -> list[JobsResult]:
    """Every (placement, scheduler) run, on up to ``--jobs`` processes; each run is
    seeded on its own, so the results do not depend on how many run at once."""
    tasks = [(mix, p, s, args.seed, rules) for p in placements for s in schedulers]
    jobs = args.jobs or os.cpu_count() or 1
    if jobs <= 1 or len(tasks) == 1:
        return [_one(t) for t in tasks]
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks))) as pool:
        return list(pool.map(_one, tasks))


def _write(runs: list[JobsResult], out: Path, mix: JobMix) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "jobs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=JOB_FIELDS)
        w.writeheader()
        for r in runs:
            for row in r.jobs:
                w.writerow({"run": f"{r.placement}/{r.scheduler}", **row})
    files = [str(path)]
    files.append(str(plots.jct_cdf(runs, out / "jct_cdf.png", mix.name)))
    files.append(str(plots.bars(runs, out / "avg_jct.png", mix.name)))
    files.append(str(plots.utilization(runs, out / "gpu_utilization.png", mix.name)))
    return files
