"""Real users for the tests of ordinary users' jobs: accounts made with ``useradd`` for a
module and removed at its end, the calls they make run as them (``setpriv``), and a
folder every user may read holding the client-only wheel in a venv of Debian's Python
(a user cannot enter this checkout's venv, which lies under root's home) and the job
tools they run.
"""

from __future__ import annotations

import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.install import ROOT, build_wheel, make_venv
from tests.netns import sh

TOOLS = ("job_tool.py", "registry_call.py", "slurm/ring.py")  # under tests/, copied flat
SYSTEM_PYTHON = "/usr/bin/python3"  # Debian's: any user may run it


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    @property
    def argv(self) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--"]


@pytest.fixture(scope="module")
def users():
    """alice and bob, made for this module and removed at its end."""
    made = []
    try:
        for who in ("alice", "bob"):
            name = f"gk{who}{uuid.uuid4().hex[:6]}"
            sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name)
            made.append(name)
        yield [User(n, pwd.getpwnam(n).pw_uid, pwd.getpwnam(n).pw_gid) for n in made]
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False, capture_output=True)


@pytest.fixture(scope="module")
def shared():
    """A folder every user may read: the client-only venv, the job tools, agents' sockets."""
    top = Path(tempfile.mkdtemp(prefix="grouper-users-"))
    try:
        top.chmod(0o755)
        wheel = build_wheel(ROOT / "client", top / "dist")
        make_venv(top / "venv", "client.txt", wheel, python=SYSTEM_PYTHON)
        for tool in TOOLS:
            shutil.copy(ROOT / "tests" / tool, top / Path(tool).name)
        subprocess.run(["chmod", "-R", "a+rX", str(top)], check=True)
        yield top
    finally:
        shutil.rmtree(top, ignore_errors=True)
