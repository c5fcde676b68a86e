"""One way to write a figure: ``simulator/plots.py`` is the only module that imports
matplotlib, loads it on the first figure only, and writes, styles and closes figures
the same way for every caller."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from grouper.simulator import plots

ROOT = Path(__file__).resolve().parents[2]
PLOTS = ROOT / "simulator" / "plots.py"
SOURCES = ("common", "pda", "workloads", "agent", "coordinator", "simulator", "trafficgen",
           "topologies", "experiments", "grouper", "scripts")  # fmt: skip


def imports_matplotlib(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        else:
            continue
        if any(n.split(".")[0] == "matplotlib" for n in names):
            return True
    return False


def test_only_the_plot_module_imports_matplotlib():
    found = {
        str(path.relative_to(ROOT))
        for top in SOURCES
        for path in (ROOT / top).rglob("*.py")
        if imports_matplotlib(path)
    }
    assert found == {str(PLOTS.relative_to(ROOT))}


def test_modules_that_can_plot_do_not_load_matplotlib_on_import():
    code = (
        "import sys\n"
        "import grouper.simulator.plots, grouper.simulator.report, grouper.simulator.bench\n"
        "import grouper.simulator.jobs.plots, grouper.experiments.calibrate_report\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_save_writes_a_png_in_a_new_directory_and_closes_the_figure(tmp_path):
    fig, ax = plots.figure((3, 2))
    ax.plot([1, 2, 3], [1, 4, 9], label="squares")
    path = plots.finish(fig, ax, tmp_path / "new" / "dir" / "f.png", "x", "y", "title")
    assert path == tmp_path / "new" / "dir" / "f.png"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plots.pyplot().get_backend().lower() == "agg"
    assert plots.pyplot().get_fignums() == []
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("x", "y", "title")
    assert ax.get_legend() is not None


def test_grouped_bars_keep_series_that_share_a_name():
    fig, ax = plots.figure((3, 2))
    plots.grouped_bars(ax, [("a", [1.0, 2.0]), ("a", [3.0, 4.0])], ["one", "two"])
    assert len(ax.containers) == 2
    assert [t.get_text() for t in ax.get_xticklabels()] == ["one", "two"]
    plots.pyplot().close(fig)


def test_cdf_ends_at_one():
    fig, ax = plots.figure((3, 2))
    plots.cdf(ax, [3.0, 1.0, 2.0], "x")
    line = ax.get_lines()[0]
    assert list(line.get_xdata()) == [1.0, 2.0, 3.0]
    assert line.get_ydata()[-1] == 1.0
    plots.pyplot().close(fig)
