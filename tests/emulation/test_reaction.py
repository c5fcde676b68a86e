"""``grouper bench reaction`` on the emulated fabric: every registration is traced from
the registry call to the sending host's kernel, through the coordinator's trace."""

from __future__ import annotations

import json
import subprocess

from tests.netns import GROUPER


def test_bench_reaction_times_each_registration_to_its_senders_kernel(tmp_path):
    out = tmp_path / "reaction.json"
    subprocess.run(
        [*GROUPER, "bench", "reaction", "--events", "8", "--gap", "0.3", "--json", str(out)],
        cwd=tmp_path,  # any directory: every path it hands its agents is absolute
        check=True,
        timeout=240,
    )
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert len(rows) == 8 and result["measured"] == sum(r["status"] == "ok" for r in rows)
    registered = [r for r in rows if r["kind"] == "registered"]
    assert len(registered) >= 3, "the driver starts with three registrations"
    for r in registered:  # a new flow always changes its sender's plan
        assert r["status"] == "ok" and r["host"] in r["hosts"], r
        assert r["seconds"] > 0 and all(r[k] >= 0 for k in ("planning", "kernel")), r
    # events wake the coordinator: a registration reaches the kernel well inside the
    # 5 s period (about 15 ms on a quiet machine; waiting for the next periodic cycle
    # would take 2.5 s on average). The old check, max >= p50, held by definition.
    assert 0 < result["seconds"]["p50"] < 1.0, result["seconds"]
