"""Table V against the choices of Wang et al.'s own simulator, one at a time.

The authors' simulator is public (github.com/HKBU-HPML/dl-scheduling, ``online/``:
``job_master.py``, ``job.py``, ``cluster.py``). builtin:wang-64gpu already takes its
32,768 MB GPUs. Read against our engine, it differs in two more ways that can move
Ada-SRSF against SRSF(1) (docs/results/job-scheduling.md), and the paper's text in one:

* ``16gb``: GPUs of 16,000 MB, the V100-16GB the paper's text names;
* ``eta``: its 10 GbE settings are ``beta = 0.856`` and ``eta = 0.235`` ms per MB, so
  eta = 2.35e-10 s/B (we read 3e-10 off Fig. 2(b));
* ``poll``: its AdaDUAL check asks a running all-reduce for its remaining bytes with a
  method that adds the bytes moved since the last rate update to the transferred count
  without moving the time stamp. The simulator steps in 1 ms slots and updates every
  running all-reduce each slot, so each waiting job that polls a running all-reduce in
  a slot moves it one slot further: with p jobs polling, it moves at (1 + p) times its
  rate. Only Ada-SRSF polls (SRSF(n) only counts tasks). A waiting job polls when the
  busiest of its servers carries exactly one all-reduce, and it polls the all-reduce
  of the first such server.

``poll`` here is a rate model of that artefact under the paper's rules. The artefact as
their code has it (each check moves the all-reduce it reads) is ``--reference-poll``,
and their rules are ``--rules code``; ``scripts/wang_authors_table.py`` runs both on
job sets drawn as theirs are, beside their own simulator (docs/results/job-scheduling.md).

Usage: ``python scripts/jobs_reference.py [VARIANT,...] [SEED]`` with variants from
``base, 16gb, eta, poll, all`` (default: all five) and the builtin's seed (default 1).
Prints a Markdown table of average JCT and GPU utilisation for SRSF(1), SRSF(2) and
Ada-SRSF with LWF-1 on builtin:wang-64gpu (Table V). ``python scripts/jobs_reference.py
table4 [SEED]`` instead runs Ada-SRSF with LWF-1, FF, LS and RAND, with and without the
poll (Table IV). Writes nothing.
"""

from __future__ import annotations

import dataclasses
import sys
from concurrent.futures import ProcessPoolExecutor

from grouper.common.contention import ContentionModel
from grouper.simulator.jobs.engine import COMM, Job, Simulation
from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.workloads.jobmix import GpuCluster, JobMix, wang_64gpu

SCHEDULERS = ("srsf:1", "srsf:2", "ada-srsf")
PLACEMENTS = ("lwf:1", "ff", "ls", "rand")
VARIANTS = {
    "base": (),
    "eta": ("eta",),
    "16gb": ("16gb",),
    "poll": ("poll",),
    "all": ("eta", "poll"),
}


class Polled(Simulation):
    """Running all-reduces move one more slot's bytes per waiting job that polls them."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.pollers: dict[Job, int] = {}

    def admit_comm(self) -> None:
        super().admit_comm()
        counts: dict[Job, int] = {}
        if self.scheduler.kind == "ada-srsf":
            for job in self.comm_ready:  # waiting after this round of decisions
                loads = [len(self.server_comm[s]) for s in job.servers]
                if max(loads) != 1:
                    continue
                first = next(s for s, n in zip(job.servers, loads, strict=True) if n)
                for task in self.server_comm[first]:
                    counts[task] = counts.get(task, 0) + 1
        changed = counts.keys() | self.pollers.keys()
        changed = {t for t in changed if counts.get(t) != self.pollers.get(t) and t.phase == COMM}
        self.pollers = counts
        self.rerate_jobs(changed)

    def comm_rate(self, job: Job) -> float:
        return super().comm_rate(job) * (1 + self.pollers.get(job, 0))


def mix_for(parts: tuple[str, ...], seed: int) -> JobMix:
    mix = wang_64gpu(seed=seed)
    if "eta" in parts:
        m = mix.contention
        mix = dataclasses.replace(mix, contention=ContentionModel(m.a, m.b, 2.35e-10))
    if "16gb" in parts:
        c = mix.cluster
        mix = dataclasses.replace(mix, cluster=GpuCluster(c.servers, c.gpus_per_server, 16000))
    return mix


def point(task: tuple[str, str, int, str]) -> dict:
    variant, scheduler, seed, placement = task
    parts = VARIANTS[variant]
    engine = Polled if "poll" in parts else Simulation
    sim = engine(mix_for(parts, seed), parse_placement(placement), parse_scheduler(scheduler), seed)
    return sim.run().summary


def table4(seed: int) -> None:
    tasks = [(v, "ada-srsf", seed, p) for v in ("base", "poll") for p in PLACEMENTS]
    with ProcessPoolExecutor() as pool:
        res = dict(zip(tasks, pool.map(point, tasks), strict=True))
    print("| placement | avg JCT | GPU util | avg JCT with the poll | GPU util with the poll |")
    print("|---|---|---|---|---|")
    for p in PLACEMENTS:
        base, poll = (res[(v, "ada-srsf", seed, p)] for v in ("base", "poll"))
        print(
            f"| {p} | {base['avg_jct']:.1f} s | {base['avg_gpu_utilization'] * 100:.2f}% "
            f"| {poll['avg_jct']:.1f} s | {poll['avg_gpu_utilization'] * 100:.2f}% |"
        )


def main() -> int:
    seed = sys.argv[2] if len(sys.argv) > 2 else "1"
    if not seed.isdigit():
        print(f"seed: must be a whole number, got {seed!r}")
        return 2
    if len(sys.argv) > 1 and sys.argv[1] == "table4":
        table4(int(seed))
        return 0
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(VARIANTS)
    bad = [n for n in names if n not in VARIANTS]
    if bad:
        print(f"variant: unknown {bad[0]!r}, expected one of {', '.join(VARIANTS)} or table4")
        return 2
    tasks = [(v, s, int(seed), "lwf:1") for v in names for s in SCHEDULERS]
    with ProcessPoolExecutor() as pool:
        res = dict(zip(tasks, pool.map(point, tasks), strict=True))
    print(
        "| variant | SRSF(1) avg JCT | SRSF(2) | Ada-SRSF | Ada vs SRSF(1) | Ada vs SRSF(2) "
        "| GPU util SRSF(1) / Ada |"
    )
    print("|---|---|---|---|---|---|---|")
    for v in names:
        one, two, ada = (res[(v, s, int(seed), "lwf:1")] for s in SCHEDULERS)
        print(
            f"| {v} | {one['avg_jct']:.1f} s | {two['avg_jct']:.1f} s | {ada['avg_jct']:.1f} s "
            f"| {(1 - ada['avg_jct'] / one['avg_jct']) * 100:+.1f}% "
            f"| {(1 - ada['avg_jct'] / two['avg_jct']) * 100:+.1f}% "
            f"| {one['avg_gpu_utilization'] * 100:.1f}% / "
            f"{ada['avg_gpu_utilization'] * 100:.1f}% |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
