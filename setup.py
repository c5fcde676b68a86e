"""Build hook: wheels carry gRPC stubs generated from ``proto/`` at build time, and
every package installs under one name, ``grouper``: the folder ``agent/`` is the
package ``grouper.agent`` (docs/explanation/pipeline.md, "Installed names")."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "proto"))
from generate import generate  # noqa: E402


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        super().run()
        generate(ROOT if self.editable_mode else self.build_lib)


# the repository's top-level folders that install as grouper.<folder>
ROOMS = ("common", "pda", "workloads", "agent", "coordinator", "simulator", "trafficgen",
         "topologies", "experiments")  # fmt: skip


def packages() -> list[str]:
    found = find_packages(str(ROOT), include=["grouper", "grouper.*"])
    for room in ROOMS:
        found += [f"grouper.{p}" for p in find_packages(str(ROOT), include=[room, f"{room}.*"])]
    return found


setup(
    packages=packages(),
    package_dir={"grouper": "grouper", **{f"grouper.{room}": room for room in ROOMS}},
    package_data={
        "grouper.workloads": ["builtin/*.yaml"],
        "grouper.experiments": ["builtin/*.yaml"],
    },
    cmdclass={"build_py": BuildPyWithStubs},
)
