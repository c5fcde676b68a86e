"""Write an offline coflow instance as a workload YAML, in the shape of the public
Facebook coflow benchmark (each coflow: some mappers send to some reducers, all at time
0): ``python scripts/coflow_instance.py COFLOWS PORTS SEED [--json] > FILE``. Used to
time loading and ordering at trace scale (docs/results/pda.md). ``--json`` writes JSON,
which is YAML too and loads about eight times faster."""

from __future__ import annotations

import json
import sys

import numpy as np
import yaml


def instance(coflows: int, ports: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    hosts = [f"p{i}" for i in range(ports)]
    cojobs = []
    for c in range(coflows):
        m = int(rng.integers(1, min(ports, 8) + 1))
        r = int(rng.integers(1, min(ports, 8) + 1))
        mappers = rng.choice(ports, m, replace=False)
        reducers = rng.choice(ports, r, replace=False)
        size = float(rng.lognormal(2.0, 1.5))  # MB per reducer, heavy-tailed
        flows = [
            {"src": hosts[a], "dst": hosts[b], "bytes": round(size * 1e6 / m)}
            for b in reducers
            for a in mappers
            if a != b
        ] or [{"src": hosts[0], "dst": hosts[1], "bytes": round(size * 1e6)}]
        cojobs.append(
            {"id": f"c{c}", "stages": [1], "jobs": [{"id": "j", "arch": "flows", "flows": flows}]}
        )
    return {"name": f"coflows-{coflows}", "capacity": 1.25e8, "hosts": hosts, "cojobs": cojobs}


if __name__ == "__main__":
    n, ports, seed = (int(x) for x in sys.argv[1:4])
    doc = instance(n, ports, seed)
    if "--json" in sys.argv[4:]:
        json.dump(doc, sys.stdout)
    else:
        yaml.safe_dump(doc, sys.stdout, default_flow_style=None, sort_keys=False)
