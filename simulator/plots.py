"""The one way a figure is written: every PNG of the project (simulator reports, job
plots, benches, calibration, the scripts under ``scripts/``) goes through here.

matplotlib is imported on the first figure, on the Agg backend (files only, no display),
so importing a module that can plot costs nothing until it does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 120
LEGEND_SIZE = 8
GRID_ALPHA = 0.3


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure(size: tuple[float, float], ncols: int = 1) -> tuple[Figure, Any]:
    """A new figure of ``size`` inches with ``ncols`` axes side by side: ``(fig, ax)``,
    or ``(fig, (ax1, ax2, ...))`` for several."""
    return pyplot().subplots(1, ncols, figsize=size)


def label(
    ax: Axes,
    xlabel: str | None = None,
    ylabel: str | None = None,
    title: str | None = None,
    *,
    grid: Literal["major", "both"] | None = "major",
    legend: bool = True,
) -> None:
    """Our styling of one axes: its labels and title (those given), a light grid
    (``None``: none; ``"both"``: minor ticks too, for log axes) and a small legend."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    if grid is not None:
        ax.grid(True, which=grid, alpha=GRID_ALPHA)
    if legend:
        ax.legend(fontsize=LEGEND_SIZE)


def save(fig: Figure, path: str | Path, dpi: int = DPI) -> Path:
    """Lay out ``fig``, write it to ``path`` (its directory made if missing) and close it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
    return path


def finish(
    fig: Figure, ax: Axes, path: str | Path, xlabel: str, ylabel: str, title: str | None = None
) -> Path:
    """Label, grid, legend and save a figure of one axes; close it."""
    label(ax, xlabel, ylabel, title)
    return save(fig, path)


def cdf(ax: Axes, values: Sequence[float] | Any, name: str) -> None:
    """The empirical CDF of ``values`` as a step line labelled ``name``."""
    import numpy as np

    x = np.sort(np.asarray(values))
    ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=name)


def grouped_bars(
    ax: Axes, series: Sequence[tuple[str, Sequence[float]]], groups: Sequence[str]
) -> None:
    """One bar per (name, values) of ``series`` in each group, side by side (in that
    order; two series may share a name), the groups' names under them."""
    import numpy as np

    width = 0.8 / max(len(series), 1)
    at = np.arange(len(groups))
    for i, (name, values) in enumerate(series):
        ax.bar(at + i * width, values, width, label=name)
    ax.set_xticks(at + width * (len(series) - 1) / 2)
    ax.set_xticklabels(groups)
