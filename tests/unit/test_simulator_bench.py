"""``grouper bench simulator``'s runs: each in a fresh interpreter, on the code the
command itself imported."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.unit.test_perfmap import SMALL


def test_bench_runs_the_package_its_command_imported_not_the_working_directorys(
    other_checkout: Path,
) -> None:
    """Each run's interpreter takes grouper from where the command took it: a folder
    named grouper in the working directory (a checkout of another commit) is not it."""
    trace = other_checkout / "t.txt"
    trace.write_text(SMALL)
    got = subprocess.run(
        [sys.executable, "-P", "-m", "grouper.cli", "bench", "simulator", "--trace",
         str(trace), "--policies", "fs", "--json", "-"],
        capture_output=True, text=True, cwd=other_checkout,
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    assert "working directory" not in got.stderr
