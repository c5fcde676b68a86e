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
the work tree that runs asv; older than ``proto/generate.py``, its stubs are generated
with ``grpc_tools.protoc`` as its Makefile did; older than the one ``grouper`` package
(7895802), its warm-ups are imported by their top-level names (``pda.order``), and a
warm-up the commit does not have is left out.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

WARM_UPS = ("grouper.pda.order", "grouper.simulator.allocator", "grouper.simulator.run")

# the warm-up of the first of these modules the commit has
WARM_UP = """
import importlib, importlib.util, sys
for name in sys.argv[1:]:
    try:
        found = importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        found = False
    if found:
        getattr(importlib.import_module(name), "warm_up", lambda: None)()
        break
"""


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
    elif protos := sorted(str(p.relative_to(src)) for p in src.glob("proto/grouper/v1/*.proto")):
        protoc = [sys.executable, "-m", "grpc_tools.protoc", "-I", "proto", "--python_out=."]
        protoc += ["--grpc_python_out=.", "--pyi_out=."]
        subprocess.run([*protoc, *protos], cwd=src, check=True)
    for module in WARM_UPS:  # from outside the copy: its grouper/ must not shadow the install
        names = (module, module.removeprefix("grouper."))
        subprocess.run([sys.executable, "-c", WARM_UP, *names], cwd=cache_dir, check=True)


if __name__ == "__main__":
    what, build_dir, cache_dir, conf_dir = sys.argv[1], *map(Path, sys.argv[2:5])
    if what == "build":
        build(build_dir, cache_dir, conf_dir)
    else:
        install(cache_dir)
