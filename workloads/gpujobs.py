"""The job-level data both job workloads share (Wang et al.'s :mod:`workloads.jobmix`,
Yu et al.'s :mod:`workloads.rarmix`, the authors' job files in
:mod:`workloads.authors_jobs`): the model, job, cluster and mix records and the
Microsoft trace's GPU counts. Imports nothing of ``workloads``, so every job workload
module can import it at the top.
"""

from __future__ import annotations

from dataclasses import dataclass

from grouper.common.contention import ContentionModel

MB = 1e6  # the papers' model sizes are in MB of 10^6 bytes (b is seconds per byte)
MAX_JOBS = 100_000
MAX_GPUS = 1_000_000


@dataclass(frozen=True)
class Model:
    """A DNN as Wang et al.'s Table III describes it (times in seconds per iteration)."""

    name: str
    size_mb: float
    memory_mb: float
    t_f: float
    t_b: float

    @property
    def bytes(self) -> float:
        return self.size_mb * MB

    @property
    def compute(self) -> float:
        return self.t_f + self.t_b


@dataclass(frozen=True)
class GpuJob:
    id: int
    arrival: float
    gpus: int
    iterations: int
    model: Model


@dataclass(frozen=True)
class GpuCluster:
    servers: int
    gpus_per_server: int
    gpu_memory_mb: float = 16000.0

    @property
    def gpus(self) -> int:
        return self.servers * self.gpus_per_server


@dataclass(frozen=True)
class JobMix:
    name: str
    cluster: GpuCluster
    jobs: tuple[GpuJob, ...]
    contention: ContentionModel
    iteration_batch: int = 1
    meta: dict | None = None
    # a job holds its GPUs through its all-reduce (no other job computes on them)
    hold_gpus: bool = False


# Wang et al. Section V-A: 160 jobs, half on one GPU; the rest by GPU count
WANG_GPU_MIX = ((1, 80), (2, 14), (4, 26), (8, 30), (16, 8), (32, 2))


def gpu_counts(jobs: int) -> list[int]:
    """The GPU count of each of ``jobs`` jobs in :data:`WANG_GPU_MIX`'s proportions
    (every count at least once), in the mix's order: shuffle before use."""
    total = sum(n for _, n in WANG_GPU_MIX)
    sizes: list[int] = []
    for g, n in WANG_GPU_MIX:
        sizes += [g] * max(1 if n else 0, round(n * jobs / total))
    return sizes[:jobs]
