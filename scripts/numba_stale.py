"""Drop numba disk caches that may be stale: ``python scripts/numba_stale.py DIR...``.

numba's cache notices a change to a compiled function's own file, not to a compiled
function it calls from another file: after ``simulator/fast_fill.py`` changes, the
cached ``fast_state.advance`` (which inlines its kernels) would still be loaded. So a
cache older than the newest source file of its package is removed, and numba compiles
it again at first use. ``make setup`` runs this before it warms the caches.
"""

from __future__ import annotations

import sys
from pathlib import Path


def drop_stale(package: Path) -> int:
    """Remove the ``__pycache__/*.nbi``/``*.nbc`` files under ``package`` older than
    its newest ``.py``; returns how many were removed."""
    sources = list(package.rglob("*.py"))
    if not sources:
        return 0
    newest = max(p.stat().st_mtime for p in sources)
    dropped = 0
    for cache in (*package.rglob("__pycache__/*.nbi"), *package.rglob("__pycache__/*.nbc")):
        if cache.stat().st_mtime < newest:
            cache.unlink()
            dropped += 1
    return dropped


def main(argv: list[str]) -> int:
    for name in argv:
        package = Path(name)
        if not package.is_dir():
            print(f"numba_stale: error: {name}: not a directory", file=sys.stderr)
            return 2
        n = drop_stale(package)
        if n:
            print(f"numba_stale: {name}: {n} cache files older than its sources removed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
