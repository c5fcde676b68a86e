"""``grouper-client``: the training-side subset of ``grouper`` (client, launcher,
framework integrations, gRPC stubs), built from the same sources as the full
distribution. Stubs are generated from ``proto/`` at build time."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "proto"))
from generate import generate  # noqa: E402

# the modules of the package ``grouper`` itself that training code needs
CLIENT_MODULES = {"__init__", "client", "client_main", "launcher"}


class BuildClient(build_py):
    def find_package_modules(self, package: str, package_dir: str) -> list:
        found = super().find_package_modules(package, package_dir)
        if package != "grouper":
            return found
        return [m for m in found if m[1] in CLIENT_MODULES]

    def run(self) -> None:
        super().run()
        generate(self.build_lib)


setup(
    package_dir={"grouper": "../grouper"},
    packages=["grouper", "grouper.integrations", "grouper.v1"],
    cmdclass={"build_py": BuildClient},
)
