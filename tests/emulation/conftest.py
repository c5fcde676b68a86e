"""Emulation tests: a small Mininet leaf-spine with real agents, coordinator and TCP."""

from __future__ import annotations

import os
import shutil

import pytest


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "emulation tests need root (Mininet, namespaces, qdiscs)"
    elif not shutil.which("mnexec"):
        reason = "emulation tests need Mininet (apt-get install mininet)"
    if reason is None:
        return
    if os.environ.get("GROUPER_REQUIRE_ROOT_TESTS"):
        raise pytest.UsageError(f"{reason}, and GROUPER_REQUIRE_ROOT_TESTS is set")
    for item in items:
        if "tests/emulation" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))
