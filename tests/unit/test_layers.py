"""Every import arrow points down: CLI -> daemons/simulator -> workloads -> pda -> common.

Read from the source with ``ast`` (no imports run). ``grouper`` is the CLI package; the
lower layers may use only its wire contract (``grouper.v1``, generated from the
.proto files), the cluster config schema (``grouper.cluster_config``), and, for the
experiments that run real training code, the integrations a user's job would import.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = {
    "common", "pda", "workloads", "simulator", "agent", "coordinator", "trafficgen",
    "topologies", "experiments", "grouper",
}  # fmt: skip
GROUPER_BELOW = {"grouper.v1", "grouper.cluster_config"}
ALLOWED = {
    "common": set(),
    "pda": {"common"},
    "workloads": {"common", "pda"},
    "simulator": {"common", "pda", "workloads"},
    "trafficgen": {"common", "pda", *GROUPER_BELOW},
    "agent": {"common", "pda", *GROUPER_BELOW},
    "coordinator": {"common", "pda", "workloads", *GROUPER_BELOW},
    "topologies": {"common", "pda"},
    "experiments": {
        "common",
        "pda",
        "workloads",
        "simulator",
        "trafficgen",
        "topologies",
        *GROUPER_BELOW,
        "grouper.integrations.torch",
        "grouper.integrations.optuna",
    },  # fmt: skip
}


def imports_of(package: str) -> dict[str, set[str]]:
    """Module of ours (``grouper.x.y`` kept whole, others by package) -> files using it."""
    out: dict[str, set[str]] = {}
    for path in (ROOT / package).rglob("*.py"):
        if "_pb2" in path.name:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in OURS and top != package:
                    key = ".".join(name.split(".")[:3]) if top == "grouper" else top
                    key = "grouper.v1" if key.startswith("grouper.v1") else key
                    out.setdefault(key, set()).add(str(path.relative_to(ROOT)))
    return out


def test_every_import_points_down():
    wrong = {
        f"{package} -> {dep}": sorted(files)
        for package, allowed in ALLOWED.items()
        for dep, files in imports_of(package).items()
        if dep not in allowed
    }
    assert wrong == {}


def test_the_checker_sees_imports():
    assert "common" in imports_of("pda")
    assert "grouper.v1" in imports_of("agent")
