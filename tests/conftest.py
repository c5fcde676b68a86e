"""Fixtures shared by the root-only layers."""

from __future__ import annotations

import pytest

from tests.netns import NetPair


@pytest.fixture
def pair(request):
    """Two namespaces joined by a veth pair, removed whatever the test did.

    Parametrize indirectly with a TX queue count for a multi-queue veth.
    """
    p = NetPair(txqueues=getattr(request, "param", 1))
    try:
        yield p
    finally:
        p.close()
