"""Job-level workloads (``grouper simulate --mode jobs``): whole training jobs on a GPU
cluster, as in Wang et al. 2020 (Section III) and Yu et al. 2022 (Section 4).

A job asks for ``gpus`` GPUs, runs ``iterations`` iterations of forward + backward
compute on each of them and, when its GPUs span more than one server, an all-reduce of
the model's gradients (``size_mb``) between iterations. Jobs on one server communicate
over NVLink, which both papers count as free.

YAML (``kind: jobs``)::

    kind: jobs
    name: my-mix
    cluster: {servers: 16, gpus_per_server: 4, gpu_memory_mb: 16000}
    contention: {a: 6.69e-4, b: 8.53e-10, eta: 3.0e-10}   # optional (Eq. 5)
    models:
      resnet50: {size_mb: 99.2, memory_mb: 3213, t_f: 0.025, t_b: 0.0374}
    jobs:
      - {arrival: 0, gpus: 4, iterations: 2000, model: resnet50}
    iteration_batch: 1     # simulate K iterations as one (K x compute, K x bytes)
    hold_gpus: false       # true: a job's GPUs idle through its all-reduce
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from grouper.common import validate as v
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.scheduling import parse_admission
from grouper.common.yamlfile import parse_yaml, read_text
from grouper.workloads.authors_jobs import load_job_dir
from grouper.workloads.gpujobs import (
    MAX_GPUS,
    MAX_JOBS,
    WANG_GPU_MIX,
    GpuCluster,
    GpuJob,
    JobMix,
    Model,
    gpu_counts,
)
from grouper.workloads.rarmix import parse_rarmix, yu_rar

__all__ = [
    "WANG_GPU_MIX", "WANG_MODELS", "GpuCluster", "GpuJob", "JobMix", "Model", "load_jobmix",
    "parse_jobmix", "wang_64gpu",
]  # fmt: skip

# Wang et al., Table III (Tesla V100, PyTorch 1.2): size MB, memory MB, t_f and t_b in s
WANG_MODELS = {
    "vgg16": Model("vgg16", 526.4, 4527, 0.0358, 0.0537),
    "resnet50": Model("resnet50", 99.2, 3213, 0.0250, 0.0374),
    "inception-v3": Model("inception-v3", 103.0, 3291, 0.0349, 0.0524),
    "lstm-ptb": Model("lstm-ptb", 251.8, 2751, 0.0315, 0.0473),
}
WANG_GPU_MEMORY_MB = 32768.0  # the authors' simulator (see wang_64gpu)


def wang_64gpu(
    seed: int = 1, jobs: int = 160, batch: int = 1, hold_gpus: bool = False, **_: Any
) -> JobMix:
    """Wang et al.'s setting: 16 servers x 4 V100, 10 GbE, 160 jobs arriving uniformly
    over 1,200 s, GPU counts as in Section V-A, 1,000-6,000 iterations (half short, at
    most 1,600, half long), models drawn uniformly from Table III. ``jobs`` scales the
    mix down.

    Each GPU has 32,768 MB, as in the simulator the authors published with the paper
    (``online/cluster.py`` of github.com/HKBU-HPML/dl-scheduling), which produced
    Tables IV and V; the paper's text names the V100-16GB. With 16,000 MB more jobs
    queue for memory (docs/results/job-scheduling.md; the 16 GB runs:
    git show 696dd6f^:docs/job-scheduling.md)."""
    rng = np.random.default_rng(seed)
    sizes = gpu_counts(jobs)
    rng.shuffle(sizes)
    arrivals = np.sort(rng.uniform(0, 1200, len(sizes)))
    # half short (at most 1,600 iterations, the paper's line between short and long),
    # half long (1,601 to 6,000): uniform within each half
    long_ = rng.random(len(sizes)) < 0.5
    iters = np.where(
        long_, rng.integers(1601, 6001, len(sizes)), rng.integers(1000, 1601, len(sizes))
    )
    names = list(WANG_MODELS)
    models = rng.integers(0, len(names), len(sizes))
    out = tuple(
        GpuJob(i, float(round(arrivals[i])), sizes[i], int(iters[i]), WANG_MODELS[names[models[i]]])
        for i in range(len(sizes))
    )
    return JobMix(
        "wang-64gpu",
        GpuCluster(16, 4, WANG_GPU_MEMORY_MB),
        out,
        ContentionModel(),
        batch,
        {"seed": seed, "jobs": len(out)},
        hold_gpus,
    )


JOB_GENERATORS = {"wang-64gpu": wang_64gpu}
TOP_KEYS = (
    "kind", "name", "cluster", "contention", "models", "jobs", "iteration_batch", "hold_gpus",
)  # fmt: skip


def load_jobmix(spec: str, **params: Any) -> Any:
    """``builtin:NAME`` (generated with ``params``) or a YAML file: a :class:`JobMix`
    (``kind: jobs``, Wang et al.) or a :class:`~workloads.rarmix.RarMix`
    (``kind: rar-jobs``, Yu et al.), or a directory of the authors' ``job_*.json``
    files (:mod:`workloads.authors_jobs`)."""
    generators = {**JOB_GENERATORS, "yu-rar": yu_rar}
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name not in generators:
            known = ", ".join(sorted(generators))
            raise ConfigError("workload", f"unknown job-level builtin {name!r} (known: {known})")
        return generators[name](**params)
    if Path(spec).is_dir():
        return load_job_dir(spec)
    data = parse_yaml(read_text(spec, "workload"), "workload")
    name = v.label_from_path(spec)
    if isinstance(data, dict) and data.get("kind") == "rar-jobs":
        return parse_rarmix(data, default_name=name)
    return parse_jobmix(data, default_name=name)


def _models(raw: Any) -> dict[str, Model]:
    out = {}
    for name, m in v.mapping(raw, "models").items():
        path = f"models.{name}"
        m = v.mapping(m, path, ("size_mb", "memory_mb", "t_f", "t_b"))
        out[str(name)] = Model(
            v.label(name, path),
            v.number(v.get(m, "size_mb", path), f"{path}.size_mb", minimum=0),
            v.number(m.get("memory_mb", 0), f"{path}.memory_mb", minimum=0),
            v.number(v.get(m, "t_f", path), f"{path}.t_f", minimum=0),
            v.number(v.get(m, "t_b", path), f"{path}.t_b", minimum=0),
        )
        if out[str(name)].compute <= 0:
            raise ConfigError(f"{path}.t_b", "t_f + t_b must be positive")
    return out


def _cluster(raw: Any) -> GpuCluster:
    m = v.mapping(raw, "cluster", ("servers", "gpus_per_server", "gpu_memory_mb"))
    c = GpuCluster(
        v.integer(v.get(m, "servers", "cluster"), "cluster.servers", minimum=1),
        v.integer(v.get(m, "gpus_per_server", "cluster"), "cluster.gpus_per_server", minimum=1),
        v.number(m.get("gpu_memory_mb", 16000.0), "cluster.gpu_memory_mb", positive=True),
    )
    if c.gpus > MAX_GPUS:
        raise ConfigError("cluster.servers", f"at most {MAX_GPUS} GPUs in all, got {c.gpus}")
    return c


def parse_jobmix(data: Any, default_name: str = "jobs") -> JobMix:
    top = v.mapping(data, "", TOP_KEYS)
    if top.get("kind") != "jobs":
        kind = top.get("kind")
        raise ConfigError("kind", f"must be 'jobs' for a job-level workload, got {kind!r}")
    name = v.label(top.get("name", default_name), "name")
    cluster = _cluster(v.get(top, "cluster", ""))
    contention = parse_admission(top.get("contention", {}), "") or ContentionModel()
    models = _models(v.get(top, "models", ""))
    raw_jobs = v.sequence(v.get(top, "jobs", ""), "jobs", min_len=1)
    if len(raw_jobs) > MAX_JOBS:
        raise ConfigError("jobs", f"at most {MAX_JOBS} jobs, got {len(raw_jobs)}")
    jobs = []
    for i, j in enumerate(raw_jobs):
        path = f"jobs[{i}]"
        j = v.mapping(j, path, ("arrival", "gpus", "iterations", "model"))
        model = v.string(v.get(j, "model", path), f"{path}.model")
        if model not in models:
            known = ", ".join(models)
            raise ConfigError(f"{path}.model", f"unknown model {model!r} (known: {known})")
        gpus = v.integer(v.get(j, "gpus", path), f"{path}.gpus", minimum=1)
        if gpus > cluster.gpus:
            raise ConfigError(
                f"{path}.gpus", f"the cluster has {cluster.gpus} GPUs, the job asks {gpus}"
            )
        if models[model].memory_mb > cluster.gpu_memory_mb:
            raise ConfigError(
                f"{path}.model",
                f"needs {models[model].memory_mb:g} MB per GPU, "
                f"a GPU has {cluster.gpu_memory_mb:g}",
            )
        arrival = v.number(j.get("arrival", 0), f"{path}.arrival", minimum=0)
        if arrival > 1e9:
            raise ConfigError(f"{path}.arrival", f"at most 1e9 s, got {arrival:g}")
        iters = v.integer(v.get(j, "iterations", path), f"{path}.iterations", minimum=1)
        jobs.append(GpuJob(i, arrival, gpus, iters, models[model]))
    batch = v.integer(top.get("iteration_batch", 1), "iteration_batch", minimum=1)
    hold = top.get("hold_gpus", False)
    if not isinstance(hold, bool):
        raise ConfigError("hold_gpus", f"expected true or false, got {hold!r}")
    return JobMix(name, cluster, tuple(jobs), contention, batch, None, hold)
