"""Emulation tests: a small Mininet leaf-spine with real agents, coordinator and TCP."""

from __future__ import annotations

import os
import shutil

from tests.layers import skip_layer


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "emulation tests need root (Mininet, namespaces, qdiscs)"
    elif not shutil.which("mnexec"):
        reason = "emulation tests need Mininet (apt-get install mininet)"
    skip_layer(items, "emulation", reason)
