"""``grouper calibrate``'s outputs: the plot (after Wang et al. Fig. 2) and the
constants written into a cluster config, everything else in it untouched."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.pda.calibration import Fit
from grouper.simulator import plots


def plot_fit(fit: Fit, path: Path, title: str) -> Path:
    """(a) one task alone: time against size, with ``a + b M``; (b) time against the
    number of concurrent tasks, per size, with Eq. 5. Points are measured."""
    fig, (ax1, ax2) = plots.figure((10, 4), ncols=2)
    m = fit.model
    alone = [r for r in fit.residuals if r["k"] == 1]
    x = np.array([r["bytes"] for r in alone]) / 1e6
    ax1.plot(x, [r["measured"] for r in alone], "o", label="measured")
    grid = np.linspace(0, x.max() * 1.05, 50)
    ax1.plot(grid, [m.time(1, g * 1e6) for g in grid], "-", label="a + b M")
    plots.label(
        ax1, "message size M (MB)", "all-reduce time (s)", "(a) one task", grid=None, legend=False
    )
    ax1.legend()  # the default size: two entries
    for size in sorted({r["bytes"] for r in fit.residuals}):
        pts = sorted((r["k"], r["measured"]) for r in fit.residuals if r["bytes"] == size)
        ks = np.array([p[0] for p in pts])
        line = ax2.plot(ks, [p[1] for p in pts], "o", label=f"{size / 1e6:g} MB")[0]
        ax2.plot(ks, [m.time(k, size) for k in ks], "-", color=line.get_color())
    plots.label(
        ax2,
        "concurrent tasks k",
        "average time per task (s)",
        "(b) k tasks: points measured, lines Eq. 5",
        grid=None,
    )
    fig.suptitle(f"{title}: a={m.a:.3g} s, b={m.b:.3g} s/B, eta={m.eta:.3g} s/B")
    return plots.save(fig, path)


_KEY = re.compile(r"^(?P<indent>\s+)(?P<key>a|b|eta):(?P<gap>\s*)(?P<value>[^#\s]+)(?P<rest>.*)$")


def write_admission(path: Path, model: ContentionModel, *, dry_run: bool = False) -> None:
    """Set ``admission.a``, ``.b`` and ``.eta`` in the cluster config at ``path``,
    changing only those values: every other line, comment and key order stays as it
    was (the section is added at the end when missing). A flow-style section on one
    line (``admission: {enabled: true, a: 6.7e-4, ...}``) is rewritten on that line.
    The new text is checked as a cluster config, with the values read back, before it
    replaces the file (atomically). ``dry_run``: check all of that, write nothing (the
    command does it before measuring, so a file it cannot update is refused first)."""
    from grouper.common.cluster_config import load_cluster_config

    values = {k: f"{x:.4g}" for k, x in (("a", model.a), ("b", model.b), ("eta", model.eta))}
    lines = path.read_text().splitlines()
    head = next((i for i, ln in enumerate(lines) if re.match(r"admission:\s*(#.*)?$", ln)), None)
    flow = next((i for i, ln in enumerate(lines) if ln.startswith("admission:")), None)
    if head is not None:
        _update_block(lines, head, values)
    elif flow is not None:
        lines[flow] = _update_flow(lines[flow], values)
    else:
        lines += ["", "admission:", *(f"  {k}: {v}" for k, v in values.items())]
    tmp = path.with_name(f".{path.name}.calibrate")
    try:
        tmp.write_text("\n".join(lines) + "\n")
    except OSError as exc:
        raise ConfigError(
            "--write", f"cannot write beside {str(path)[:80]}: {exc.strerror}"
        ) from None
    try:
        got = load_cluster_config(str(tmp)).queues.admission
        if got is None or (got.a, got.b, got.eta) != tuple(float(v) for v in values.values()):
            raise ConfigError("admission", "could not be updated in place (enabled: false?)")
    except ConfigError:
        tmp.unlink()
        raise
    if dry_run:
        tmp.unlink()
    else:
        os.replace(tmp, path)


def _update_block(lines: list[str], head: int, values: dict[str, str]) -> None:
    end = head + 1
    while end < len(lines) and (not lines[end].strip() or lines[end][0] in " #\t"):
        end += 1
    seen, indent = set(), "  "
    for i in range(head + 1, end):
        m = _KEY.match(lines[i])
        if m:
            key, indent = m["key"], m["indent"]
            line = f"{indent}{key}: {values[key]}"
            comment = m["rest"].lstrip()
            if comment:  # keep the comment in its column
                column = len(lines[i]) - len(comment)
                line += " " * max(column - len(line), 1) + comment
            lines[i] = line
            seen.add(key)
    last = max((i for i in range(head + 1, end) if lines[i].strip()), default=head)
    lines[last + 1 : last + 1] = [f"{indent}{k}: {v}" for k, v in values.items() if k not in seen]


def _update_flow(line: str, values: dict[str, str]) -> str:
    """``admission: {...}  # comment`` with a, b and eta set, its other keys as they were."""
    import yaml

    body = line[len("admission:") :]
    text, _, comment = body.partition("#")
    try:
        mapping = yaml.safe_load(text)
    except yaml.YAMLError:
        mapping = None
    if not isinstance(mapping, dict):
        raise ConfigError("admission", "spans several lines in flow style; write it as a block")
    mapping.update({k: float(v) for k, v in values.items()})
    items = ", ".join(f"{k}: {values.get(k, _scalar(v))}" for k, v in mapping.items())
    return f"admission: {{{items}}}" + (f"  #{comment}" if comment else "")


def _scalar(value: object) -> str:
    return "true" if value is True else "false" if value is False else str(value)
