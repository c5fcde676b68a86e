"""``grouper calibrate``'s outputs: the plot (after Wang et al. Fig. 2) and the
constants written into a cluster config, comments and all."""

from __future__ import annotations

import io
import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from common.errors import ConfigError  # noqa: E402
from pda.admission import ContentionModel  # noqa: E402
from pda.calibration import Fit  # noqa: E402


def plot_fit(fit: Fit, path: Path, title: str) -> Path:
    """(a) one task alone: time against size, with ``a + b M``; (b) time against the
    number of concurrent tasks, per size, with Eq. 5. Points are measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    m = fit.model
    alone = [r for r in fit.residuals if r["k"] == 1]
    x = np.array([r["bytes"] for r in alone]) / 1e6
    ax1.plot(x, [r["measured"] for r in alone], "o", label="measured")
    grid = np.linspace(0, x.max() * 1.05, 50)
    ax1.plot(grid, [m.time(1, g * 1e6) for g in grid], "-", label="a + b M")
    ax1.set_xlabel("message size M (MB)")
    ax1.set_ylabel("all-reduce time (s)")
    ax1.set_title("(a) one task")
    ax1.legend()
    for size in sorted({r["bytes"] for r in fit.residuals}):
        pts = sorted((r["k"], r["measured"]) for r in fit.residuals if r["bytes"] == size)
        ks = np.array([p[0] for p in pts])
        line = ax2.plot(ks, [p[1] for p in pts], "o", label=f"{size / 1e6:g} MB")[0]
        ax2.plot(ks, [m.time(k, size) for k in ks], "-", color=line.get_color())
    ax2.set_xlabel("concurrent tasks k")
    ax2.set_ylabel("average time per task (s)")
    ax2.set_title("(b) k tasks: points measured, lines Eq. 5")
    ax2.legend(fontsize=8)
    fig.suptitle(f"{title}: a={m.a:.3g} s, b={m.b:.3g} s/B, eta={m.eta:.3g} s/B")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_admission(path: Path, model: ContentionModel) -> None:
    """Set ``admission.a``, ``.b`` and ``.eta`` in the cluster config at ``path``,
    leaving every other line, comment and key order as it was. The new text is checked
    as a cluster config before it replaces the file (atomically)."""
    from ruamel.yaml import YAML

    from grouper.cluster_config import load_cluster_config

    yaml = YAML()  # round-trip: comments and order survive
    yaml.preserve_quotes = True
    data = yaml.load(path.read_text())
    if "admission" not in data or data["admission"] is None:
        data["admission"] = {}
    section = data["admission"]
    for key, value in (("a", model.a), ("b", model.b), ("eta", model.eta)):
        section[key] = float(f"{value:.4g}")
    buf = io.StringIO()
    yaml.dump(data, buf)
    tmp = path.with_name(f".{path.name}.calibrate")
    tmp.write_text(buf.getvalue())
    try:
        load_cluster_config(str(tmp))
    except ConfigError:
        tmp.unlink()
        raise
    os.replace(tmp, path)
