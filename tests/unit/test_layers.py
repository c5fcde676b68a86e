"""Every import arrow points down the layer map of docs/explanation/pipeline.md, with no
exceptions listed anywhere.

Read from the source with ``ast`` (no imports run). A room is a top-level folder, which
installs as ``grouper.<folder>`` (``grouper.agent`` is ``agent/``), or one part of
``grouper/``: its generated stubs (``grouper.v1``, part of the bottom), its
command line (``grouper.cli``, the top) and the training side (``grouper.client``,
``grouper.launcher``, ``grouper.integrations``: what a training environment installs).
A room imports only rooms on lower floors; the training side imports only the bottom
and itself, and only the command line and the experiments import it.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FLOORS = {
    "common": 0,
    "grouper.v1": 0,
    "pda": 1,
    "workloads": 2,
    "agent": 3,
    "coordinator": 3,
    "simulator": 3,
    "trafficgen": 3,
    "topologies": 3,
    "experiments": 4,
    "grouper.cli": 5,
    "grouper.client_main": 6,  # the client's script: runs the full command line if there
}
TRAINING = {"grouper.client", "grouper.launcher", "grouper.integrations"}
USES_TRAINING = {"experiments", "grouper.cli", "grouper.client_main"}
FOLDERS = ("common", "pda", "workloads", "agent", "coordinator", "simulator", "trafficgen",
           "topologies", "experiments")  # fmt: skip
PACKAGES = (*FOLDERS, "grouper")


def room_of_module(name: str) -> str | None:
    """``grouper.agent.kernel.nft`` -> ``agent``; ``grouper.cli.main`` -> ``grouper.cli``."""
    parts = name.split(".")
    if parts[0] != "grouper":
        return None
    if len(parts) == 1:
        return "grouper"
    return parts[1] if parts[1] in FOLDERS else f"grouper.{parts[1]}"


def imported_names(path: Path) -> list[str]:
    """Every absolute module name ``path`` imports (``from grouper import client`` gives
    ``grouper.client``)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "grouper":
                names += [f"grouper.{a.name}" for a in node.names]
            else:
                names.append(node.module)
    return names


def room_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    if rel[0] == "grouper" and len(rel) > 1:
        return f"grouper.{Path(rel[1]).stem}"
    return rel[0]


def arrows() -> dict[tuple[str, str], set[str]]:
    """(room, room it imports) -> the files that do."""
    out: dict[tuple[str, str], set[str]] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "_pb2" in path.name or path.name == "__init__.py" and package == "grouper":
                continue
            src = room_of_file(path)
            for name in imported_names(path):
                dst = room_of_module(name)
                if dst is not None and dst != src:
                    out.setdefault((src, dst), set()).add(str(path.relative_to(ROOT)))
    return out


def allowed(src: str, dst: str) -> bool:
    if dst in TRAINING:
        return src in TRAINING or src in USES_TRAINING
    if src in TRAINING:
        return FLOORS.get(dst) == 0
    return FLOORS[dst] < FLOORS[src]


def test_every_room_has_a_place_on_the_map():
    rooms = {src for src, _ in arrows()} | {dst for _, dst in arrows()}
    assert rooms <= set(FLOORS) | TRAINING


def test_every_import_points_down():
    wrong = {f"{s} -> {d}": sorted(f) for (s, d), f in arrows().items() if not allowed(s, d)}
    assert wrong == {}


def test_the_checker_sees_imports():
    seen = arrows()
    assert ("pda", "common") in seen and ("agent", "grouper.v1") in seen
    assert ("grouper.integrations", "grouper.client") in seen
    assert not allowed("agent", "coordinator") and not allowed("common", "pda")
    assert not allowed("agent", "grouper.client") and not allowed("grouper.client", "pda")


def test_nothing_imports_our_folders_by_their_bare_names():
    """``import agent`` would load a second copy of ``grouper.agent`` from the source
    tree (or someone else's ``agent`` once installed): every name is ``grouper.``."""
    wrong = {}
    for top in ("tests", "scripts", "proto", *PACKAGES):
        for path in (ROOT / top).rglob("*.py"):
            bare = [n for n in imported_names(path) if n.split(".")[0] in FOLDERS]
            if bare and "_pb2" not in path.name:
                wrong[str(path.relative_to(ROOT))] = bare
    assert wrong == {}
