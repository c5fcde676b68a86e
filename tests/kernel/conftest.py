"""Kernel tests: real namespaces, veths, qdiscs, nftables and TCP. Root only."""

from __future__ import annotations

import os

import pytest

from tests.layers import skip_layer
from tests.netns import AgentProc, NetStar, cluster_yaml
from tests.users import shared, users  # noqa: F401 (fixtures of real users)


def pytest_collection_modifyitems(config, items):
    reason = None
    if os.geteuid() != 0:
        reason = "kernel tests need root (network namespaces, qdiscs, nftables)"
    skip_layer(items, "kernel", reason)


@pytest.fixture
def agent_env(pair, tmp_path):
    def make(plan_ttl: float = 30.0, link_mbps: float = 30.0, backend: str = "auto") -> AgentProc:
        cfg = cluster_yaml(
            tmp_path / "cluster.yaml",
            [
                ("a", pair.addr_a, pair.nic_a, link_mbps),
                ("b", pair.addr_b, pair.nic_b, link_mbps),
            ],
            plan_ttl=plan_ttl,
            backend=backend,
        )
        return AgentProc(pair, pair.a, "a", cfg, tmp_path)

    agents: list[AgentProc] = []

    def factory(**kw) -> AgentProc:
        agents.append(make(**kw))
        return agents[-1]

    yield factory
    for a in agents:
        if a.proc and a.proc.poll() is None:
            a.stop()


@pytest.fixture
def star():
    """Three hosts on one bridge, each in its own namespace."""
    s = NetStar(3)
    try:
        yield s
    finally:
        s.close()
