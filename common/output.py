"""Writing result objects: ``--json PATH`` (``-`` = stdout) and plain tables."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

_json_stream: IO[str] | None = None  # standard output, kept for the JSON while reserved


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


def _plain(obj: Any) -> Any:
    if hasattr(obj, "item") and callable(obj.item):  # numpy scalars
        return obj.item()
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON")


INDENT_BELOW = 1 << 20  # larger results are written compact: indenting is pure Python


def dumps(obj: Any) -> str:
    """``obj`` as JSON text: indented when small, compact when large (the C encoder
    runs only without indent: a 2,000-coflow order took 3.5 s to indent). NaN and
    infinities become null."""
    try:
        text = json.dumps(obj, allow_nan=False, default=_plain)
    except (ValueError, TypeError):  # NaN, infinity or keys JSON lacks: clean, retry
        obj = _finite(obj)
        text = json.dumps(obj, allow_nan=False)
    if len(text) < INDENT_BELOW:
        text = json.dumps(json.loads(text), indent=2)
    return text


def write_json(obj: dict[str, Any], path: str | None) -> None:
    if path is None:
        return
    text = dumps(obj) + "\n"
    if path == "-":
        out = _json_stream or sys.stdout
        out.write(text)
        out.flush()
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)


@contextmanager
def stdout_reserved_for_json(active: bool) -> Iterator[None]:
    """While a command writes its JSON to standard output (``--json -``), everything
    else meant for it goes to standard error: Python-level prints through
    ``sys.stdout``, and whatever a library or a child process writes to file
    descriptor 1 (a solver's banner, say). Only :func:`write_json` reaches the real
    standard output, so it holds exactly one JSON object. Restored on exit."""
    global _json_stream
    if not active:
        yield
        return
    out = sys.stdout
    out.flush()
    try:
        fd_backed = out.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a test's in-memory capture
        fd_backed = False
    saved = os.dup(1)
    os.dup2(2, 1)
    _json_stream = os.fdopen(os.dup(saved), "w", encoding="utf-8") if fd_backed else out
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = out
        _json_stream.flush()
        if fd_backed:
            _json_stream.close()
        _json_stream = None
        os.dup2(saved, 1)
        os.close(saved)


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
