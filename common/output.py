"""Writing result objects: ``--json PATH`` (``-`` = stdout) and plain tables."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from grouper.common.errors import ConfigError, short

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


def write_json(obj: dict[str, Any], path: str | None, flag: str = "--json") -> None:
    """Write ``obj`` to ``path`` (``-``: standard output); a failed write is one
    ConfigError line naming ``flag`` (the checks before the work catch most)."""
    if path is None:
        return
    text = dumps(obj) + "\n"
    try:
        if path == "-":
            out = _json_stream or sys.stdout
            out.write(text)
            out.flush()
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text)
    except OSError as exc:
        where = "standard output" if path == "-" else short(path, 60)
        raise ConfigError(flag, f"cannot write {where}: {exc.strerror or exc}") from None


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
        try:
            _json_stream.flush()
            if fd_backed:
                _json_stream.close()
        except OSError:  # already reported by write_json, as one line
            pass
        _json_stream = None
        os.dup2(saved, 1)
        os.close(saved)


def _lstat(path: Path, flag: str) -> os.stat_result | None:
    """``path``'s own status, None when nothing is there; any other failure (a name too
    long, a loop of links, no permission) is one ConfigError line."""
    try:
        return path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise ConfigError(flag, f"cannot use {short(str(path), 60)}: {exc.strerror}") from None


def _creatable(path: Path, flag: str) -> None:
    """Nothing is at ``path``: its closest existing ancestor must be a directory we may
    create entries in."""
    base = path.parent
    while _lstat(base, flag) is None and base != base.parent:
        base = base.parent
    if not base.is_dir():
        raise ConfigError(flag, f"{short(str(base), 60)} is not a directory")
    if not os.access(base, os.W_OK | os.X_OK):
        raise ConfigError(flag, f"cannot create files in {short(str(base), 60)}")


def _target(path: str, flag: str) -> os.stat_result | None:
    """The status of what ``path`` names (links followed); None when it is to be made."""
    if not path or "\0" in path:
        raise ConfigError(flag, "expected a path")
    p = Path(path)
    if _lstat(p, flag) is None or not p.exists():  # nothing there, or a dangling link
        _creatable(p, flag)
        return None
    try:
        return p.stat()
    except OSError as exc:
        raise ConfigError(flag, f"cannot use {short(path, 60)}: {exc.strerror}") from None


def check_output_file(path: str | None, flag: str = "--json") -> None:
    """Before any work: ``path`` (``-`` = standard output) can take a file: not a
    directory or a device (``/dev/null`` and terminals aside), its parent a directory."""
    if path is None or path == "-":
        return
    st = _target(path, flag)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(flag, f"{short(path, 60)} is a directory (give a file, or - for stdout)")
    if stat.S_ISCHR(st.st_mode) and not _harmless_device(Path(path), st):
        raise ConfigError(flag, f"{short(path, 60)} is a device (give a file, - or /dev/null)")
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISFIFO(st.st_mode) or stat.S_ISCHR(st.st_mode)):
        raise ConfigError(flag, f"{short(path, 60)} is not a file (give a file, or - for stdout)")
    if not os.access(path, os.W_OK):
        raise ConfigError(flag, f"{short(path, 60)} is not writable")


def _harmless_device(p: Path, st: os.stat_result) -> bool:
    """/dev/null and terminals take output; /dev/full and the rest do not."""
    if st.st_rdev == os.stat(os.devnull).st_rdev:
        return True
    return os.path.realpath(p).startswith(("/dev/pts/", "/dev/tty"))


def check_output_dir(path: str | None, flag: str = "--out") -> None:
    """Before any work: ``path`` is a directory we can write in, or can be made one."""
    if path is None:
        return
    st = _target(path, flag)
    if st is None:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(flag, f"{short(path, 60)} exists and is not a directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigError(flag, f"cannot create files in {short(path, 60)}")


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
