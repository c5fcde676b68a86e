"""The systemd units as shipped: ``systemd-analyze verify`` on the files, and the
coordinator's user reading its TLS key with exactly the credentials its unit gives it
(``setpriv``, as systemd applies User= and Group=)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.pki import make_pki

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UID, GID = 64321, 64321  # stand for the unit's user and group on this test machine


def unit_setting(unit: str, key: str) -> str:
    m = re.search(rf"^{key}=(.*)$", (DEPLOY / unit).read_text(), re.M)
    assert m, f"{unit} has no {key}="
    return m[1].strip()


def test_units_pass_systemd_analyze_verify(tmp_path):
    """The files as shipped, with only their install path pointed at this checkout."""
    for unit in ("grouper-agent.service", "grouper-coordinator.service"):
        text = (DEPLOY / unit).read_text().replace("/opt/grouper", str(ROOT))
        (tmp_path / unit).write_text(text)
    proc = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr


def check_config_as(uid: int, gid: int, config: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs",
         sys.executable, "-m", "grouper.cli", "check-config", str(config)],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip


@pytest.fixture
def tls_config():
    """A cluster config with tls:, its key given to the unit's group as the unit's
    comment says (root:grouper, 640), in a directory anyone may traverse (pytest's
    own are root's alone); removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="grouper-units-") as d:
        yield _tls_config(Path(d))


def test_an_unreadable_config_is_one_line_not_a_traceback():
    with tempfile.TemporaryDirectory(prefix="grouper-units-") as d:
        closed = Path(d) / "closed"
        closed.mkdir(mode=0o700)
        (closed / "cluster.yaml").write_text("cluster: x\n")
        Path(d).chmod(0o755)
        proc = check_config_as(UID, GID, closed / "cluster.yaml")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "permission denied" in proc.stderr


def _tls_config(tmp_path: Path) -> Path:
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki", ("coordinator",))
    key = pki / "coordinator.key"
    os.chown(key, 0, GID)
    key.chmod(0o640)
    for d in (tmp_path, pki):
        d.chmod(0o755)
    for f in ("ca.pem", "coordinator.pem"):
        (pki / f).chmod(0o644)
    sample = (ROOT / "docs" / "cluster.sample.yaml").read_text()
    config = tmp_path / "cluster.yaml"
    config.write_text(
        sample + f"\ntls:\n  ca: {pki}/ca.pem\n  cert: {pki}/coordinator.pem\n"
        f"  key: {key}\n  coordinator_name: coordinator\n"
    )
    config.chmod(0o644)
    return config


def test_the_coordinators_user_reads_its_key_and_a_dynamic_user_could_not(tls_config):
    assert unit_setting("grouper-coordinator.service", "User") == "grouper"
    assert unit_setting("grouper-coordinator.service", "Group") == "grouper"
    ok = check_config_as(UID, GID, tls_config)
    assert ok.returncode == 0, ok.stderr
    other = check_config_as(UID + 1, GID + 1, tls_config)  # what DynamicUser= would get
    assert other.returncode == 2 and "tls.key: cannot read" in other.stderr, other.stderr
