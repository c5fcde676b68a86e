"""Plots of job-level runs, after Wang et al. Figs. 4-6: JCT CDF, GPU utilisation
distribution, and bars of average / median / 95th-percentile JCT and makespan (Yu et
al. Fig. 4). Measured values only."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from simulator.jobs.engine import JobsResult  # noqa: E402


def _label(r: JobsResult) -> str:
    return f"{r.placement} / {r.scheduler}"


def jct_cdf(runs: list[JobsResult], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        x = np.sort([j["jct"] for j in r.jobs])
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=_label(r))
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("CDF")
    ax.set_title(f"{title}: JCT")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def utilization(runs: list[JobsResult], path: Path, title: str) -> Path:
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in runs:
        x = np.sort(np.asarray(r.gpu_utilization) * 100)
        ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=_label(r))
    ax.set_xlabel("GPU utilisation over the makespan (%)")
    ax.set_ylabel("CDF of GPUs")
    ax.set_title(f"{title}: GPU utilisation")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def bars(runs: list[JobsResult], path: Path, title: str) -> Path:
    metrics = [
        ("avg_jct", "average JCT"),
        ("median_jct", "median JCT"),
        ("p95_jct", "95th pct JCT"),
        ("makespan", "makespan"),
    ]
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.8 / max(len(runs), 1)
    for i, r in enumerate(runs):
        ax.bar(
            np.arange(len(metrics)) + i * width,
            [r.summary[m] for m, _ in metrics],
            width,
            label=_label(r),
        )
    ax.set_xticks(np.arange(len(metrics)) + width * (len(runs) - 1) / 2)
    ax.set_xticklabels([name for _, name in metrics])
    ax.set_ylabel("seconds")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
