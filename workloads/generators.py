"""Generated builtin workloads: the grouper paper's testbed and its 60-server simulation.

Assumptions beyond the paper are parameters with documented defaults:

* compute time per iteration of each model (the paper gives model sizes, not step
  times): DeepSpeech2 0.35 s, ResNet152 0.45 s, AlexNet 0.08 s, VGG19 0.25 s;
* ``scale`` multiplies every stage's iterations (500, 1000, 2000, 4000) so a run fits
  the time budget of this machine; results are reported with the scale used;
* successive halving: a seeded hidden score ranks a cojob's jobs; after each stage the
  worse half is killed (8 -> 4 -> 2 -> 1). Online policies cannot see the score.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from grouper.pda.model import Cojob, Job
from grouper.workloads.model import Workload
from grouper.workloads.placement import Placer

MODELS = {  # name: (bytes, compute seconds per iteration)
    "DeepSpeech2": (160e6, 0.35),
    "ResNet152": (230e6, 0.45),
    "AlexNet": (250e6, 0.08),
    "VGG19": (580e6, 0.25),
}
STAGES = (500, 1000, 2000, 4000)


def halving_runs(n: int, stages: int, rng: np.random.Generator) -> list[int]:
    """Stages each of ``n`` jobs runs: ranks from a hidden score, worse half out each time."""
    rank = rng.permutation(n)
    runs = []
    for r in rank:
        k = 1
        while k < stages and r < math.ceil(n / 2**k):
            k += 1
        runs.append(k)
    return runs


def _jobs(
    placer: Placer,
    names: list[str],
    model: float,
    compute: float,
    arch: str,
    n_jobs: int,
    runs: list[int],
    iters: int,
    workers: int,
    servers: int,
) -> tuple[Job, ...]:
    out = []
    for j in range(n_jobs):
        if arch == "ps":
            hosts = placer.place(workers + servers, compute * iters)
            w = [names[h] for h in hosts[:workers]]
            s = [names[h] for h in hosts[workers:]]
            out.append(Job.ps(f"j{j}", model, w, s, compute_time=compute, stages=runs[j]))
        else:
            hosts = placer.place(workers, compute * iters)
            w = [names[h] for h in hosts]
            if len(set(w)) < 2:  # a ring on one host has no network traffic; spread it
                w = [names[(hosts[0] + i) % len(names)] for i in range(workers)]
            out.append(Job.ring(f"j{j}", model, w, compute_time=compute, stages=runs[j]))
    return tuple(out)


def testbed(
    seed: int = 1,
    scale: float = 0.02,
    rounds: int = 3,
    placement: str = "random",
    *,
    stage_factors: dict[str, float] | None = None,
    stagger: float = 0.0,
    model_bytes: float | None = None,
    name: str = "testbed",
    **_: float,
) -> Workload:
    """Section V-B: 3 leaves x 3 spines at 1 Gbps, 23 hosts; per model one cojob of 8 PS
    jobs (2 workers, 2 servers) at a time, relaunched when its third stage ends.

    Variants (``scripts/testbed_properties.py``): ``stage_factors`` multiplies a model's
    stage iterations, ``stagger`` spreads the first round's arrivals evenly over that
    many seconds, ``model_bytes`` gives every model the same size."""
    rng = np.random.default_rng(seed)
    names = [f"h{i + 1}" for i in range(23)]
    placer = Placer(23, 8, placement, seed)
    cojobs, release = [], {}
    for r in range(rounds):
        for k, (m, (model, compute)) in enumerate(MODELS.items()):
            factor = (stage_factors or {}).get(m, 1.0)
            iters = tuple(max(1, round(s * scale * factor)) for s in STAGES)
            cid = f"{m}-r{r + 1}"
            runs = halving_runs(8, 4, rng)
            size = model_bytes or model
            jobs = _jobs(placer, names, size, compute, "ps", 8, runs, sum(iters), 2, 2)
            arrival = stagger * k / len(MODELS) if r == 0 else math.inf
            cojobs.append(Cojob(cid, iters, jobs, arrival))
            if r:
                release[cid] = (f"{m}-r{r}", 3)
    return Workload(
        name,
        tuple(names),
        tuple(cojobs),
        1e9 / 8,
        "s",
        topology="leafspine:3,3,8,1,23",
        release_after=release,
        period=1.0,
        meta={
            "seed": seed,
            "scale": scale,
            "rounds": rounds,
            "placement": placement,
            "iterations": [max(1, round(s * scale)) for s in STAGES],
            "stage_factors": dict(stage_factors or {}),
            "stagger": stagger,
            "model_bytes": model_bytes,
        },
    )


def sim60(
    seed: int = 1,
    load: float = 1.0,
    comm_ratio: float = 1.0,
    scale: float = 0.02,
    cojobs: int = 48,
    placement: str = "lwf:4",
    **_: float,
) -> Workload:
    """Section V-C: 60 servers x 4 GPUs in 6 racks of 10, 6 spines, 10 Gbps.

    Cojobs of 8 jobs draw a model uniformly; half are PS (2 workers, 2 servers), half
    ring all-reduce (4 workers). Inter-arrival times are Pareto (Lomax, shape 1.5) --
    heavy-tailed like the Microsoft (Philly) trace's -- with a mean chosen so that at
    ``load`` 1.0 about eight cojobs' traffic is offered at once; ``load`` divides it.
    ``comm_ratio`` is communication time over compute time of one iteration alone
    (compute = alone transfer time / comm_ratio).
    """
    if not 0 < load <= 10:
        from grouper.common.errors import ConfigError

        raise ConfigError("--load", f"must be in (0, 10], got {load}")
    rng = np.random.default_rng(seed)
    names = [f"h{i + 1}" for i in range(60)]
    placer = Placer(60, 4, placement, seed)
    rate = 10e9 / 8
    iters = tuple(max(1, round(s * scale)) for s in STAGES)
    drawn = []
    for _ in range(cojobs):
        m = list(MODELS)[rng.integers(len(MODELS))]
        arch = "ps" if rng.random() < 0.5 else "ring"
        model = MODELS[m][0]
        comm = model / rate if arch == "ps" else 2 * 3 / 4 * model / rate
        drawn.append((m, arch, model, comm / comm_ratio, comm))
    # mean cojob duration alone: halving leaves 8, 4, 2, 1 jobs; each stage's iterations
    per_iter = np.mean([d[3] + d[4] for d in drawn])
    duration = sum(iters) * per_iter
    mean_gap = duration / 8.0 / load
    gaps = rng.pareto(1.5, size=cojobs) * mean_gap * 0.5  # Lomax(1.5) has mean 2
    arrivals = np.concatenate([[0.0], np.cumsum(gaps[1:])])
    out = []
    for g, ((m, arch, model, compute, _), t) in enumerate(zip(drawn, arrivals, strict=True)):
        runs = halving_runs(8, 4, rng)
        jobs = _jobs(
            placer, names, model, compute, arch, 8, runs, sum(iters), 2 if arch == "ps" else 4, 2
        )
        out.append(Cojob(f"c{g + 1}-{m}", iters, jobs, float(t)))
    return Workload(
        "sim60",
        tuple(names),
        tuple(out),
        rate,
        "s",
        topology="leafspine:6,6,10,10",
        period=1.0,
        meta={
            "seed": seed,
            "load": load,
            "comm_ratio": comm_ratio,
            "scale": scale,
            "cojobs": cojobs,
            "placement": placement,
            "iterations": list(iters),
            "mean_interarrival_s": mean_gap,
        },
    )


def testbed_mini(
    seed: int = 1,
    scale: float = 0.002,
    model_scale: float = 0.005,
    placement: str = "random",
    **_: float,
) -> Workload:
    """The testbed workload shrunk to the emulated ``builtin:small`` fabric (2 leaves x
    2 spines, 3 hosts per leaf, 20 Mbit/s hosts, 60 Mbit/s uplinks): one cojob per model
    (4 PS jobs of 2 workers and 2 servers, successive halving over the testbed's four
    stages), model sizes times ``model_scale`` (1/200: 0.8 to 2.9 MB) and stage
    iterations times ``scale`` (1, 2, 4, 8), so one policy runs in about two minutes."""
    rng = np.random.default_rng(seed)
    names = [f"h{i + 1}" for i in range(6)]
    placer = Placer(6, 8, placement, seed)
    iters = tuple(max(1, round(s * scale)) for s in STAGES)
    cojobs = []
    for m, (model, compute) in MODELS.items():
        runs = halving_runs(4, 4, rng)
        jobs = _jobs(placer, names, model * model_scale, compute, "ps", 4, runs, sum(iters), 2, 2)
        cojobs.append(Cojob(m, iters, jobs, 0.0))
    return Workload(
        "testbed-mini",
        tuple(names),
        tuple(cojobs),
        20e6 / 8,
        "s",
        topology="leafspine:2,2,3,0.02,uplink=0.06",
        period=0.5,
        meta={
            "seed": seed,
            "scale": scale,
            "model_scale": model_scale,
            "placement": placement,
            "iterations": list(iters),
        },
    )


# builtin:testbed-spread: the smallest model runs the longest stages, so one
# iteration's size (what Sincronia orders by) no longer tells how long a stage is
SPREAD_FACTORS = {"DeepSpeech2": 4.0, "ResNet152": 2.0, "AlexNet": 1.0, "VGG19": 0.5}


def testbed_spread(
    seed: int = 1, scale: float = 0.02, rounds: int = 3, placement: str = "random", **_: float
) -> Workload:
    """The testbed with each model's stage iterations x 4, 2, 1, 0.5 (DeepSpeech2,
    ResNet152, AlexNet, VGG19): where stage-aware ordering pulls away from Sincronia
    (docs/results/papers.md)."""
    return testbed(
        seed, scale, rounds, placement, stage_factors=SPREAD_FACTORS, name="testbed-spread"
    )


GENERATORS: dict[str, Callable[..., Workload]] = {
    "testbed": testbed,
    "testbed-spread": testbed_spread,
    "testbed-mini": testbed_mini,
    "sim60": sim60,
}
