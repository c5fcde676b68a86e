"""scripts/vm/run.py as a module (scripts/ is not a package)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent.parent


@functools.cache
def launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grouper_vm_run", ROOT / "scripts/vm/run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and the like look themselves up here
    spec.loader.exec_module(module)
    return module


def kernel_missing() -> str | None:
    """Why the VM cannot boot here (no unpacked kernel), or None."""
    try:
        launcher().kernel_dir()
    except launcher().VmError as exc:
        return str(exc)
    return None
