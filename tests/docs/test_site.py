"""The documentation site builds in strict mode: a broken link or anchor, a page the
generated reference cannot render, any warning fails (the same build as ``make docs``,
into a temporary folder). A few seconds; no root."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}  # tools' banners


def test_the_site_builds_without_a_warning(tmp_path):
    site = tmp_path / "site"
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, **QUIET},
        capture_output=True,
        text=True,
        timeout=300,
    )
    warnings = [line for line in run.stderr.splitlines() if "WARNING" in line or "Error" in line]
    assert run.returncode == 0, "\n".join(warnings or run.stderr.splitlines()[-20:])
    config = (site / "reference" / "config" / "index.html").read_text()
    assert 'id="admission.eta"' in config
    metrics = (site / "reference" / "metrics" / "index.html").read_text()
    assert 'id="grouper_agent_band_drops"' in metrics
