"""What the benchmarks share: running a ``grouper bench ...`` function as its command
does, and handing asv the runs it measured.

Every benchmark calls the function its command calls, with ``--json`` to a file of its
own, and reads the figures from there. A ``track_`` benchmark that returns
``{"samples": [...], "number": 1}`` is one whose command measures several runs in one
process: asv 0.6's runner reads such a result as it reads a timing benchmark's (its
median, its quartiles and confidence interval), so `asv continuous` compares those runs
with its Mann-Whitney test and ``--factor``, as for a ``time_`` benchmark.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

TRACE = "/work/shared/data/coflow-benchmark/FB2010-1Hr-150-0.txt"


# the folders that install as grouper.<folder> (setup.py), top-level packages before
ROOMS = ("common", "pda", "workloads", "agent", "coordinator", "simulator", "trafficgen",
         "topologies", "experiments")  # fmt: skip


def _layouts(module: str) -> tuple[str, ...]:
    """``grouper.agent.bench`` and, for a commit from before every package installed
    under ``grouper`` (7895802), ``agent.bench``."""
    bare = module.removeprefix("grouper.")
    return (module, bare) if bare != module and bare.split(".")[0] in ROOMS else (module,)


def module(name: str) -> ModuleType:
    """The module ``name`` in this commit's layout (``_layouts``); a commit without it
    has its benchmarks skipped (asv skips on NotImplementedError)."""
    for candidate in _layouts(name):
        try:
            return importlib.import_module(candidate)
        except ModuleNotFoundError as exc:
            if exc.name is None or not f"{candidate}.".startswith(f"{exc.name}."):
                raise  # the module exists and imports something missing: a failure
    raise NotImplementedError(f"this commit has no {name}")


def bench_function(*candidates: str) -> Callable[..., int]:
    """The first of ``module:function`` that this commit has (a function the suite
    calls may have moved between commits)."""
    for spec in candidates:
        name, attr = spec.split(":")
        try:
            fn = getattr(module(name), attr, None)
        except NotImplementedError:
            fn = None
        if fn is not None:
            return fn
    raise NotImplementedError(f"this commit has none of {', '.join(candidates)}")


def run_json(fn: Callable[..., int], *args: Any, **kwargs: Any) -> dict:
    """``fn(*args, json_path, **kwargs)`` as its command runs it (``--json FILE``): the
    object it wrote. A command that failed raises."""
    with tempfile.TemporaryDirectory(prefix="grouper-asv-") as tmp:
        path = str(Path(tmp) / "result.json")
        rc = fn(*args, path, **kwargs)
        if rc != 0:
            raise RuntimeError(f"{fn.__module__}.{fn.__name__} exited {rc}")
        return json.loads(Path(path).read_text())


def samples(values: list[Any], scale: float = 1.0) -> dict:
    """Runs measured by one command, as asv reads a timing benchmark's samples (a run
    with no figure, a sample missed, is left out)."""
    got = [float(v) * scale for v in values if v is not None and math.isfinite(float(v))]
    if not got:
        raise RuntimeError("the command measured nothing")
    return {"samples": got, "number": 1}


def need_root() -> None:
    """asv skips a benchmark whose setup raises NotImplementedError."""
    if os.geteuid() != 0:
        raise NotImplementedError("needs root (network namespaces)")


def need_trace() -> None:
    if not Path(TRACE).exists():
        raise NotImplementedError(f"no trace at {TRACE}")
