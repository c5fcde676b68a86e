"""Random cluster-scale instances for benchmarks and property tests.

Like real clusters, each job touches only a few hosts: PS jobs with 1-4 workers and
1-2 servers, ring jobs with 2-6 workers, model sizes from 50 to 600 MB, cojobs of 1-4
stages of 500-4000 iterations. Deterministic for a given seed.
"""

from __future__ import annotations

import numpy as np

from grouper.pda.model import Cojob, Job


def random_cojobs(hosts: int, stages: int, seed: int = 1) -> tuple[list[str], list[Cojob]]:
    rng = np.random.default_rng(seed)
    names = [f"h{i}" for i in range(hosts)]
    cojobs: list[Cojob] = []
    made = 0
    while made < stages:
        k = int(min(rng.integers(1, 5), stages - made))
        iters = tuple(int(500 * 2**i) for i in range(k))
        jobs = []
        for j in range(int(rng.integers(1, 5))):
            model = float(rng.uniform(50e6, 600e6))
            if rng.random() < 0.5:
                nw, ns = int(rng.integers(1, 5)), int(rng.integers(1, 3))
                picked = rng.choice(hosts, size=min(nw + ns, hosts), replace=False)
                workers = [names[i] for i in picked[:nw]]
                servers = [names[i] for i in picked[nw:]] or workers[:1]
                jobs.append(Job.ps(f"j{j}", model, workers, servers))
            else:
                nw = int(min(rng.integers(2, 7), max(hosts, 2)))
                picked = rng.choice(hosts, size=min(nw, hosts), replace=False)
                workers = [names[i] for i in picked]
                if len(workers) < 2:
                    workers = workers * 2
                jobs.append(Job.ring(f"j{j}", model, workers))
        cojobs.append(Cojob(f"c{len(cojobs)}", iters, tuple(jobs), arrival=0.0))
        made += k
    return names, cojobs
