"""Build hook: wheels carry gRPC stubs generated from ``proto/`` at build time."""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "proto"))
from generate import generate  # noqa: E402


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        super().run()
        generate(ROOT if self.editable_mode else self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
