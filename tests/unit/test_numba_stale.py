"""scripts/numba_stale.py: numba caches older than their package's newest source are
removed, newer ones kept; a missing package is one line, exit 2."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scripts.numba_stale import drop_stale, main


def test_caches_older_than_the_newest_source_are_dropped(tmp_path: Path) -> None:
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    old, new = cache / "caller.advance-1.py311.nbi", cache / "callee.fill-1.py311.nbi"
    data = cache / "caller.advance-1.py311.1.nbc"
    for f in (old, new, data):
        f.write_bytes(b"x")
    os.utime(old, (100, 100))
    os.utime(data, (100, 100))
    (tmp_path / "callee.py").write_text("")
    os.utime(tmp_path / "callee.py", (200, 200))  # edited after ``caller`` was cached
    os.utime(new, (300, 300))  # recompiled since
    assert drop_stale(tmp_path) == 2
    assert not old.exists() and not data.exists() and new.exists()
    assert drop_stale(tmp_path) == 0


def test_a_missing_package_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a directory" in err
