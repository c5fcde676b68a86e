"""Writing result objects: ``--json PATH`` (``-`` = stdout) and plain tables."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def write_json(obj: dict[str, Any], path: str | None) -> None:
    if path is None:
        return
    text = json.dumps(obj, indent=2, sort_keys=False) + "\n"
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
