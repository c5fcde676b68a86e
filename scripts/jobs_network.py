"""Ada-SRSF against SRSF(1) and SRSF(2) as the network gets faster (b and eta divided
by a speed-up), on builtin:wang-64gpu with LWF-1: one of the readings of Table V
tried before the authors' poll was found (its figures:
``git show 696dd6f^:docs/job-scheduling.md``). Prints a Markdown table; writes
nothing else."""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor

from grouper.common.contention import ContentionModel
from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.run import run_jobs
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.workloads.jobmix import wang_64gpu

SCHEDULERS = ("srsf:1", "srsf:2", "ada-srsf")


def point(task: tuple[float, str]) -> dict:
    speedup, scheduler = task
    mix = wang_64gpu(hold_gpus="--hold-gpus" in sys.argv)
    m = mix.contention
    mix = dataclasses.replace(mix, contention=ContentionModel(m.a, m.b / speedup, m.eta / speedup))
    return run_jobs(mix, parse_placement("lwf:1"), parse_scheduler(scheduler)).summary


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--hold-gpus"]
    speedups = [float(x) for x in (args[0] if args else "1,2,4").split(",")]
    tasks = [(s, sc) for s in speedups for sc in SCHEDULERS]
    with ProcessPoolExecutor() as pool:
        res = dict(zip(tasks, pool.map(point, tasks), strict=True))
    print(
        "| network speed-up | SRSF(1) avg JCT | SRSF(2) | Ada-SRSF | Ada vs SRSF(1) "
        "| Ada GPU util | shared starts |"
    )
    print("|---|---|---|---|---|---|---|")
    for s in speedups:
        a, b, ada = (res[(s, sc)] for sc in SCHEDULERS)
        gain = (1 - ada["avg_jct"] / a["avg_jct"]) * 100
        print(
            f"| {s:g}x | {a['avg_jct']:.0f} s | {b['avg_jct']:.0f} s | {ada['avg_jct']:.0f} s "
            f"| {gain:+.1f}% | {ada['avg_gpu_utilization'] * 100:.1f}% "
            f"| {ada['all_reduces_shared'] / ada['all_reduces'] * 100:.1f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
