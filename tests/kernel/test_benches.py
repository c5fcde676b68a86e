"""``grouper bench agent`` and ``bench datapath`` run on the real kernel and leave no
namespace behind."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_bench_agent_command_cleans_up(other_checkout: Path):
    """Run from a directory whose ``grouper/`` fails on import: the measuring child in
    the namespace takes grouper from where the command did."""
    before = netns()
    out = subprocess.run(
        [sys.executable, "-P", "-m", "grouper.cli", "bench", "agent", "--flows", "50",
         "--runs", "3", "--json", "-"],
        capture_output=True, text=True, check=True, cwd=other_checkout,
    ).stdout  # fmt: skip
    result = json.loads(out)
    assert result["flows"] == 50 and result["apply_full_ms"] > 0
    assert netns() <= before, "the bench removes its namespace"


def test_bench_datapath_command_measures_every_state_and_cleans_up(other_checkout: Path):
    """From a directory whose ``grouper/`` fails on import, as the agent bench."""
    before = netns()
    out = subprocess.run(
        [sys.executable, "-P", "-m", "grouper.cli", "bench", "datapath", "--entries", "200",
         "--runs", "2", "--seconds", "1", "--txqueues", "2", "--json", "-"],
        capture_output=True, text=True, check=True, timeout=180, cwd=other_checkout,
    ).stdout  # fmt: skip
    result = json.loads(out)
    states = {"none", "nft", "agent", "agent_10k", "agent_10k_single"}
    assert set(result["gbps"]) == states
    for state, runs in result["runs_all"].items():
        assert len(runs) == 2, state  # every state in every round
        assert all(r["gbps"] > 0 and 0 < r["cpu_s_per_gbit"] < 10 for r in runs), runs
    assert {(v["state"], v["against"]) for v in result["verdicts"]} >= {("agent", "none")}
    assert netns() <= before, "the bench removes its namespaces"
