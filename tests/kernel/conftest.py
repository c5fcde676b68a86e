"""Kernel tests: real namespaces, veths, qdiscs, nftables and TCP. Root only."""

from __future__ import annotations

import os

from tests.layers import skip_layer


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "kernel tests need root (network namespaces, qdiscs, nftables)"
    skip_layer(items, "kernel", reason)
