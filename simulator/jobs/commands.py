"""``grouper simulate --mode jobs``: placements x all-reduce schedulers on a job mix."""

from __future__ import annotations

import csv
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from common.errors import ConfigError
from common.output import table, write_json
from simulator.jobs import plots
from simulator.jobs.engine import JobsResult, simulate_jobs
from simulator.jobs.placement import parse_placement
from simulator.jobs.schedulers import parse_scheduler
from workloads.jobmix import JobMix, load_jobmix

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
    spec, params, placement, scheduler, seed = task
    mix = load_jobmix(spec, **params)
    return simulate_jobs(mix, parse_placement(placement), parse_scheduler(scheduler), seed)


def _mix_params(args: object) -> dict:
    params: dict = {"seed": args.seed}
    if getattr(args, "iteration_batch", None) is not None:
        params["batch"] = args.iteration_batch
    if getattr(args, "hold_gpus", False):
        params["hold_gpus"] = True
    return params


def simulate_jobs_cmd(args: object) -> int:
    placements = _list(args.placement or "lwf:1", "--placement")
    schedulers = _list(args.scheduler or "ada-srsf", "--scheduler")
    for p in placements:
        parse_placement(p)
    for s in schedulers:
        parse_scheduler(s)
    spec = args.workload or "builtin:wang-64gpu"
    params = _mix_params(args) if spec.startswith("builtin:") else {}
    mix = load_jobmix(spec, **params)
    if not spec.startswith("builtin:"):
        import dataclasses

        if args.iteration_batch is not None:
            mix = dataclasses.replace(mix, iteration_batch=args.iteration_batch)
        if args.hold_gpus:
            mix = dataclasses.replace(mix, hold_gpus=True)
    tasks = [(spec, params, p, s, args.seed) for p in placements for s in schedulers]
    runs = _run_all(tasks, mix, args.jobs or os.cpu_count() or 1)
    out = Path(args.out or f"results/simulate-jobs/{mix.name}")
    files = _write(runs, out, mix)
    result = {
        "workload": mix.name,
        "mode": "jobs",
        "params": mix.meta,
        "cluster": {
            "servers": mix.cluster.servers,
            "gpus_per_server": mix.cluster.gpus_per_server,
            "gpu_memory_mb": mix.cluster.gpu_memory_mb,
        },
        "jobs": len(mix.jobs),
        "contention": {"a": mix.contention.a, "b": mix.contention.b, "eta": mix.contention.eta},
        "iteration_batch": mix.iteration_batch,
        "hold_gpus": mix.hold_gpus,
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


def _run_all(tasks: list[tuple], mix: JobMix, jobs: int) -> list[JobsResult]:
    """Every (placement, scheduler) run, on up to ``jobs`` processes. A file workload
    is passed as loaded (``mix``); each run is seeded on its own."""
    if not tasks[0][0].startswith("builtin:"):
        return [
            simulate_jobs(mix, parse_placement(p), parse_scheduler(s), seed)
            for _, _, p, s, seed in tasks
        ]
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
