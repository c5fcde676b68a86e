"""How asv builds and installs a commit of grouper into its environment (asv.conf.json's
``build_command`` and ``install_command``; not a benchmark: asv imports it and finds none).

``build`` (once per commit, on a miss of asv's build cache): the commit's sources, as
asv checked them out, are copied into the commit's build cache directory. ``install``
(each time asv switches its environment to the commit): the commit's lock is installed
with hashes and no dependency resolution, then the copy, editable, without its
dependencies and without a build environment: what the Makefile's ``$(VENV)/.installed``
does. The gRPC stubs are generated into the copy, and PDA's and the simulator's numba
kernels compiled into numba's cache beside it (``make setup``'s warm-up): the copy
stays where it is while asv switches between commits, so each commit compiles once.

A commit older than the lock (no ``requirements.txt``) is installed from the lock in
the work tree that runs asv.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WARM_UPS = ("grouper.pda.order", "grouper.simulator.allocator", "grouper.simulator.run")


def _pip(*args: str, cwd: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, check=True)


def _lock(build_dir: Path, conf_dir: Path) -> Path:
    own = build_dir / "requirements.txt"
    return own if own.exists() else conf_dir / "requirements.txt"


def build(build_dir: Path, cache_dir: Path, conf_dir: Path) -> None:
    src = cache_dir / "src"
    if src.exists():
        shutil.rmtree(src)
    shutil.copytree(build_dir, src, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    shutil.copyfile(_lock(build_dir, conf_dir), cache_dir / "requirements.txt")


def install(cache_dir: Path) -> None:
    src = cache_dir / "src"
    _pip("install", "-q", "--require-hashes", "--no-deps", "-r", "requirements.txt", cwd=cache_dir)
    _pip("install", "-q", "--no-deps", "--no-build-isolation", "-e", str(src), cwd=cache_dir)
    if (src / "proto" / "generate.py").exists():
        subprocess.run([sys.executable, "proto/generate.py", "."], cwd=src, check=True)
    for module in WARM_UPS:  # from outside the copy: its grouper/ must not shadow the install
        code = f"import {module} as m\nif hasattr(m, 'warm_up'): m.warm_up()"
        subprocess.run([sys.executable, "-c", code], cwd=cache_dir, check=True)


if __name__ == "__main__":
    what, build_dir, cache_dir, conf_dir = sys.argv[1], *map(Path, sys.argv[2:5])
    if what == "build":
        build(build_dir, cache_dir, conf_dir)
    else:
        install(cache_dir)
