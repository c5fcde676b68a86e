"""Writing result objects: ``--json PATH`` (``-`` = stdout) and plain tables."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: write them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return _finite(obj.item())
    return obj


def write_json(obj: dict[str, Any], path: str | None) -> None:
    if path is None:
        return
    text = json.dumps(_finite(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
