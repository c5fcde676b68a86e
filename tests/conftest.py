"""Fixtures shared by the root-only layers."""

from __future__ import annotations

import pytest

from tests.netns import NetPair


@pytest.fixture
def pair():
    """Two namespaces joined by a veth pair, removed whatever the test did."""
    p = NetPair()
    try:
        yield p
    finally:
        p.close()
