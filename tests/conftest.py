"""Fixtures shared by the root-only layers."""

from __future__ import annotations

import pytest

from tests.netns import NetPair


@pytest.fixture
def pair(request):
    """Two namespaces joined by a veth pair, removed whatever the test did.

    Parametrize indirectly with a TX queue count for a multi-queue veth, or with
    (TX queues, switch Mbit/s) for a shaped switch between the two.
    """
    param = getattr(request, "param", 1)
    txqueues, switch_mbps = param if isinstance(param, tuple) else (param, None)
    p = NetPair(txqueues=txqueues, switch_mbps=switch_mbps)
    try:
        yield p
    finally:
        p.close()
