"""Small instance builders shared by unit tests."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
from scipy import sparse

from grouper.pda.model import Cojob, FlowSpec, Job


def one_port_cojobs(chains: list[list[float]]) -> tuple[list[str], list[Cojob]]:
    """Cojobs whose stage k moves ``chains[g][k]`` units from host ``a`` to host ``b``.

    Every stage has one iteration; job ``k`` of a cojob has already done ``k``
    iterations and runs ``k + 1`` stages, so it loads stage ``k`` only.
    """
    cojobs = []
    for g, loads in enumerate(chains):
        jobs = tuple(
            Job.explicit(f"j{k}", [FlowSpec("a", "b", load)], stages=k + 1, done=k)
            for k, load in enumerate(loads)
        )
        cojobs.append(Cojob(f"c{g}", tuple(1 for _ in loads), jobs))
    return ["a", "b"], cojobs


def random_chain_matrix(
    rng: np.random.Generator, ports: int, chains: list[int]
) -> tuple[sparse.csr_matrix, np.ndarray, np.ndarray]:
    """A random sparse load matrix with chains: (loads, prev, stage_number)."""
    n = sum(chains)
    dense = rng.uniform(0.1, 10.0, size=(n, ports)) * (rng.random((n, ports)) < 0.5)
    for i in range(n):
        if not dense[i].any():
            dense[i, rng.integers(ports)] = rng.uniform(0.1, 10.0)
    prev = np.full(n, -1)
    number = np.zeros(n, dtype=int)
    row = 0
    for length in chains:
        for k in range(length):
            number[row] = k + 1
            if k:
                prev[row] = row - 1
            row += 1
    return sparse.csr_matrix(dense), prev, number


class FakeCore:
    """Just enough of AgentCore for Collect."""

    def __init__(self, host):
        from grouper.agent.core import EventHub

        self.host = host
        self.hub = EventHub()
        self.version = 0
        self.priorities_active = False
        self.registry = type("R", (), {"jobs": {}})()
        self.kernel = type("K", (), {"backend": "htb"})()

    async def counters(self):
        return {}

    async def apply_plan(self, plan):
        self.version = plan["version"]
        return True, "", 0


def with_change(doc: Any, path: list, value: Any) -> Any:
    """A deep copy of ``doc`` with the field at ``path`` set to ``value`` (removed when
    ``value`` is ``KeyError``), for tests of path-qualified validation errors."""
    data = copy.deepcopy(doc)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data
