"""Wang et al.'s job sets as their own simulator reads them (github.com/HKBU-HPML/
dl-scheduling, ``online/job_master.py``): a directory of ``job_*.json`` files, one job
each, and a seeded generator that follows their ``microsoft_generate()``.

Each file is a mapping (their files are ``yaml.safe_dump`` output; JSON is read too)
with at least::

    dnn: vgg16          # a name
    model_size: 526.4   # MB all-reduced per iteration
    train_mem: 4527     # MB per GPU
    fw_time: 36         # ms per forward pass
    bw_time: 54         # ms per backward pass
    start_time: 1234    # ms (arrival)
    nworkers: 4         # GPUs
    iters: 37           # iterations

Their simulator steps in slots of 1 ms, so times become seconds here (/ 1000). Other
keys (``job_id``, ``lr``, ``dataset``...) are theirs and ignored. The cluster and the
contention constants are their simulator's: 16 servers of 4 GPUs with 32,768 MB each,
and 10 GbE with ``alpha = 0``, ``beta = 0.856`` and ``eta = 0.235`` ms per MB.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from grouper.common import validate as v
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.yamlfile import parse_yaml, read_text
from grouper.workloads.gpujobs import MAX_JOBS, GpuCluster, GpuJob, JobMix, Model

SLOT = 1e-3  # seconds per slot of their simulator (their unit: 1 ms)
AUTHORS_CLUSTER = GpuCluster(16, 4, 32768.0)
# their 10 GbE net_conf: beta 0.856 and eta 0.235 ms per MB of 10^6 bytes
AUTHORS_CONTENTION = ContentionModel(a=0.0, b=0.856e-9, eta=0.235e-9)
# their TEMPLATES (model_size MB, fw/bw ms, train_mem MB) and SUPPORT_NETS order
TEMPLATES = {
    "vgg16": {"model_size": 526.4, "dataset": "imagenet", "fw_time": 36, "bw_time": 54,
              "batch_size": 16, "train_mem": 4527},
    "resnet50": {"model_size": 99.2, "dataset": "imagenet", "fw_time": 25, "bw_time": 37,
                 "batch_size": 16, "train_mem": 3213},
    "inception-v3": {"model_size": 103.0, "dataset": "imagenet", "fw_time": 35,
                     "bw_time": 52, "batch_size": 16, "train_mem": 3291},
    "lstm": {"model_size": 251.8, "dataset": "ptb", "fw_time": 32, "bw_time": 47,
             "batch_size": 64, "train_mem": 2751},
}  # fmt: skip
# microsoft_generate(): cumulative job counts per 80 jobs of 1, 2, 4, 8, 16, 32 GPUs
JOB_DIST = ((1, 40), (2, 47), (4, 60), (8, 75), (16, 79), (32, 80))
ARRIVAL_MAX = 12000  # slots: 1200 * scale (10)
MIN_ITERS, MAX_ITERS = 10, 60  # 1 * scale, 6 * scale
FIELDS = ("dnn", "model_size", "train_mem", "fw_time", "bw_time", "start_time", "nworkers",
          "iters")  # fmt: skip


def microsoft_jobs(seed: int = 1, jobs: int = 160) -> list[dict[str, Any]]:
    """Job records drawn as their ``microsoft_generate()`` draws them, seeded: ``jobs``
    (a multiple of 80) jobs, by GPU count in their ``job_dist`` proportions (ids in that
    order, 1-GPU jobs first), each with a model uniform over their four templates,
    ``iters`` uniform over 10-60 and ``start_time`` ``floor(uniform(0, 12000))`` ms."""
    if jobs < 80 or jobs % 80:
        raise ConfigError("jobs", f"must be a positive multiple of 80, got {jobs}")
    step = jobs // 80
    rng = np.random.default_rng(seed)
    names = list(TEMPLATES)
    out: list[dict[str, Any]] = []
    for gpus, upto in JOB_DIST:
        while len(out) < upto * step:
            i = len(out)
            dnn = names[int(rng.integers(0, len(names)))]
            out.append(
                {
                    "job_id": i,
                    "job_name": f"j{i}",
                    "dnn": dnn,
                    **TEMPLATES[dnn],
                    "lr": 0.1,
                    "data_dir": "data",
                    "nworkers": gpus,
                    "nsteps_update": 1,
                    "cuda_enabled": 1,
                    "iters": int(rng.integers(MIN_ITERS, MAX_ITERS + 1)),
                    "start_time": int(np.floor(rng.uniform(0, ARRIVAL_MAX))),
                }
            )
    return out


def write_job_dir(records: list[dict[str, Any]], directory: str | Path) -> Path:
    """``records`` as ``job_<i>.json`` files in ``directory`` (made if missing)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for i, rec in enumerate(records):
        (d / f"job_{i}.json").write_text(json.dumps(rec, indent=1) + "\n")
    return d


def _order(path: Path) -> tuple[int, str]:
    m = re.fullmatch(r"job_(\d+)\.json", path.name)
    return (int(m.group(1)) if m else -1, path.name)


def _bounded(value: Any, path: str, most: float, positive: bool = False) -> float:
    x = v.number(value, path, minimum=None if positive else 0, positive=positive)
    if x > most:
        raise ConfigError(path, f"must be at most {most:g}, got {x:g}")
    return x


def _job(i: int, data: Any, name: str, models: dict[tuple, Model]) -> GpuJob:
    m = v.mapping(data, name)
    for key in FIELDS:
        v.get(m, key, name)
    dnn = v.label(m["dnn"], f"{name}.dnn")
    size = _bounded(m["model_size"], f"{name}.model_size", 1e6, positive=True)
    mem = v.number(m["train_mem"], f"{name}.train_mem", minimum=0)
    if mem > AUTHORS_CLUSTER.gpu_memory_mb:
        raise ConfigError(
            f"{name}.train_mem", f"a GPU has {AUTHORS_CLUSTER.gpu_memory_mb:g} MB, got {mem:g}"
        )
    fw = _bounded(m["fw_time"], f"{name}.fw_time", 1e7)
    bw = _bounded(m["bw_time"], f"{name}.bw_time", 1e7)
    if fw + bw <= 0:
        raise ConfigError(f"{name}.bw_time", "fw_time + bw_time must be positive")
    start = _bounded(m["start_time"], f"{name}.start_time", 1e12)
    gpus = v.integer(m["nworkers"], f"{name}.nworkers", minimum=1)
    if gpus > AUTHORS_CLUSTER.gpus:
        raise ConfigError(
            f"{name}.nworkers", f"the cluster has {AUTHORS_CLUSTER.gpus} GPUs, got {gpus}"
        )
    iters = v.integer(m["iters"], f"{name}.iters", minimum=1)
    if iters > 10_000_000:
        raise ConfigError(f"{name}.iters", f"at most 10,000,000, got {iters}")
    key = (dnn, size, mem, fw, bw)
    model = models.setdefault(key, Model(dnn, size, mem, fw * SLOT, bw * SLOT))
    return GpuJob(i, start * SLOT, gpus, iters, model)


def load_job_dir(directory: str | Path) -> JobMix:
    """The ``job_*.json`` files of ``directory`` as a :class:`JobMix` on their cluster,
    in file-number order. A bad file is refused naming it and the field."""
    d = Path(directory)
    files = sorted(d.glob("job_*.json"), key=_order)
    if not files:
        raise ConfigError("workload", f"{str(d)[:80]}: no job_*.json files")
    if len(files) > MAX_JOBS:
        raise ConfigError("workload", f"at most {MAX_JOBS} job files, got {len(files)}")
    models: dict[tuple, Model] = {}
    jobs = [
        _job(i, parse_yaml(read_text(f, f.name), f.name), f.name, models)
        for i, f in enumerate(files)
    ]
    return JobMix(
        v.label_from_path(str(d.resolve())) or "authors-jobs",
        AUTHORS_CLUSTER,
        tuple(jobs),
        AUTHORS_CONTENTION,
        1,
        {"directory": str(d), "jobs": len(jobs), "unit": "1 ms per slot"},
    )
