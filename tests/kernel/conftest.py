"""Kernel tests: real namespaces, veths, qdiscs, nftables and TCP. Root only."""

from __future__ import annotations

import os

import pytest

from tests.netns import NetPair


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    reason = "kernel tests need root (network namespaces, qdiscs, nftables)"
    if os.environ.get("GROUPER_REQUIRE_ROOT_TESTS"):
        raise pytest.UsageError(f"{reason}, and GROUPER_REQUIRE_ROOT_TESTS is set")
    for item in items:
        if "tests/kernel" in str(item.fspath):
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture
def pair():
    p = NetPair()
    try:
        yield p
    finally:
        p.close()
