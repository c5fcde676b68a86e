"""Ring all-reduce job batches in the setting of Yu et al. 2022 (Sections 4 and 7), for
SJF-BCO and its baselines (``grouper simulate --mode jobs --workload builtin:yu-rar``).

Every job is there at time 0 and is gang-scheduled: it gets all its GPUs at once, keeps
them to the end, and a GPU holds one worker at a time. Servers differ in size. A job's
iteration takes ``tau`` seconds on one server; spread over ``s > 1`` servers it takes
``tau (1 + xi p + xi s)``, with ``p`` the most other multi-server jobs it meets on one
of its servers (contention, their Eq. 6 with ``k = xi_1 p``) and ``xi s`` the overhead
of using ``s`` servers (``gamma = xi_2 s``); the paper sets ``xi_1 = xi_2``.

YAML (``kind: rar-jobs``)::

    kind: rar-jobs
    name: my-batch
    servers: [8, 4, 16]          # GPUs of each server
    lambda: 1                     # LBSGF's server budget factor (lambda_j >= 1)
    jobs:
      - {gpus: 4, iterations: 2000, tau: 0.1, xi: 0.03}
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.workloads.gpujobs import gpu_counts

MAX_JOBS = 100_000


@dataclass(frozen=True)
class RarJob:
    id: int
    gpus: int
    iterations: int
    tau: float  # seconds per iteration on one server
    xi: float  # contention and overhead factor (xi_1 = xi_2)

    @property
    def alone(self) -> float:
        return self.tau * self.iterations


@dataclass(frozen=True)
class RarMix:
    name: str
    servers: tuple[int, ...]  # GPUs per server
    jobs: tuple[RarJob, ...]
    lam: float = 1.0
    meta: dict | None = None

    @property
    def gpus(self) -> int:
        return sum(self.servers)


def yu_rar(seed: int = 1, servers: int = 20, jobs: int = 160, **_: Any) -> RarMix:
    """Yu et al. Section 7: 20 servers of 4, 8, 16 or 32 GPUs (uniform), 160 jobs with
    the Microsoft trace's GPU counts (80 x 1, 14 x 2, 26 x 4, 30 x 8, 8 x 16, 2 x 32),
    1,000-6,000 iterations, 0.05-0.3 s per iteration and xi in [0.01, 0.05] (uniform)."""
    rng = np.random.default_rng(seed)
    caps = tuple(int(x) for x in rng.choice([4, 8, 16, 32], size=servers))
    sizes = gpu_counts(jobs)
    rng.shuffle(sizes)
    n = len(sizes)
    iters = rng.integers(1000, 6001, n)
    tau = rng.uniform(0.05, 0.3, n)
    xi = rng.uniform(0.01, 0.05, n)
    out = tuple(
        RarJob(i, min(sizes[i], sum(caps)), int(iters[i]), float(tau[i]), float(xi[i]))
        for i in range(n)
    )
    return RarMix("yu-rar", caps, out, 1.0, {"seed": seed, "servers": servers, "jobs": n})


def parse_rarmix(data: Any, default_name: str = "rar-jobs") -> RarMix:
    top = v.mapping(data, "", ("kind", "name", "servers", "lambda", "jobs"))
    if top.get("kind") != "rar-jobs":
        raise ConfigError("kind", f"must be 'rar-jobs', got {top.get('kind')!r}")
    name = v.label(top.get("name", default_name), "name")
    caps = tuple(
        v.integer(x, f"servers[{i}]", minimum=1)
        for i, x in enumerate(v.sequence(v.get(top, "servers", ""), "servers", min_len=1))
    )
    if sum(caps) > 1_000_000:
        raise ConfigError("servers", f"at most 1,000,000 GPUs in all, got {sum(caps)}")
    lam = v.number(top.get("lambda", 1.0), "lambda", minimum=1)
    raw = v.sequence(v.get(top, "jobs", ""), "jobs", min_len=1)
    if len(raw) > MAX_JOBS:
        raise ConfigError("jobs", f"at most {MAX_JOBS} jobs, got {len(raw)}")
    jobs = []
    for i, j in enumerate(raw):
        path = f"jobs[{i}]"
        j = v.mapping(j, path, ("gpus", "iterations", "tau", "xi"))
        gpus = v.integer(v.get(j, "gpus", path), f"{path}.gpus", minimum=1)
        if gpus > sum(caps):
            raise ConfigError(f"{path}.gpus", f"the cluster has {sum(caps)} GPUs, asks {gpus}")
        jobs.append(
            RarJob(
                i,
                gpus,
                v.integer(v.get(j, "iterations", path), f"{path}.iterations", minimum=1),
                v.number(v.get(j, "tau", path), f"{path}.tau", positive=True),
                v.number(j.get("xi", 0.03), f"{path}.xi", minimum=0),
            )
        )
        if jobs[-1].xi > 1:
            raise ConfigError(f"{path}.xi", f"at most 1, got {jobs[-1].xi:g}")
    return RarMix(name, caps, tuple(jobs), lam)
