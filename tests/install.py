"""Wheels built from this checkout and installed into clean virtual environments, as an
operator's host or a training environment would get them (tests/packaging, and the
kernel test of the client against a real agent).

Wheels are built without build isolation, from the dev venv's locked setuptools and
grpcio-tools, so the build is offline and the stubs come from the pinned generator.
Dependencies come from requirements.txt and requirements/*.txt with their hashes checked.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build_wheel(project: Path, out: Path) -> Path:
    """``python -m build --wheel`` of ``project`` (the repo root or ``client/``)."""
    out.mkdir(parents=True, exist_ok=True)
    before = set(out.glob("*.whl"))
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, project],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = set(out.glob("*.whl")) - before
    return wheel


def make_venv(
    path: Path, lock: str, *wheels: Path, extra: tuple[str, ...] = (), python: str = sys.executable
) -> Path:
    """A venv of ``python`` with nothing but ``requirements/<lock>``, the ``wheels`` (no
    dependencies of their own) and ``extra`` requirement specifiers; its bin/."""
    subprocess.run([python, "-m", "venv", path], check=True, timeout=120)
    pip = [path / "bin" / "python", "-m", "pip", "install", "-q"]
    run = {"check": True, "capture_output": True, "timeout": 900}
    locked = ROOT / "requirements" / lock
    subprocess.run([*pip, "--require-hashes", "--no-deps", "-r", locked], **run)
    subprocess.run([*pip, "--no-deps", *wheels], **run)
    if extra:
        subprocess.run([*pip, "--no-deps", *extra], **run)
    return path / "bin"
