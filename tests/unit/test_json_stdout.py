"""``--json -`` writes exactly one JSON object on standard output, whatever a library
prints: every result-producing command is run as a process here and its whole
standard output parsed (``make test-newest`` runs this with the newest libraries)."""

from __future__ import annotations

import argparse
import ast
import atexit
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from grouper.cli.argtypes import JSON_HELP
from grouper.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]

# a two-coflow trace in the coflow benchmark's format (the project does not ship one)
TRACE = Path(tempfile.mkdtemp(prefix="grouper-json-")) / "trace.txt"
atexit.register(shutil.rmtree, TRACE.parent, True)
TRACE.write_text("4 2\n1 0 2 0 1 1 2:1.0\n2 10 1 3 2 0:0.5 1:0.5\n")
# small, quick arguments for every command that runs without root
UNPRIVILEGED = {
    "order": ["--workload", "builtin:fig3"],
    "lower-bound": ["--workload", "builtin:fig3"],
    "simulate": ["--workload", "builtin:fig3", "--policies", "fs,grouper"],
    "bench pda": ["--hosts", "10", "--stages", "20"],
    "bench ratio": ["--instances", "3", "--max-cojobs", "2", "--max-stages", "2"],
    "bench coordinator": ["--agents", "5", "--stages", "10", "--runs", "3"],
    "bench simulator": ["--trace", str(TRACE), "--fractions", "1", "--policies", "fs,grouper"],
}
# these need root and real namespaces: the kernel and emulation layers run them, and
# the redirection they share is tested directly below
PRIVILEGED = {
    "emulate",
    "calibrate",
    "bench agent",
    "bench reaction",
    "bench discovery",
    "bench datapath",
    "bench pooled-queue",  # tests/emulation/test_pooled_queue.py
    "status",  # asks running agents and a coordinator: tests/kernel/test_prometheus.py
}


def json_options(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.Action]:
    """Every subcommand that takes ``--json`` -> that option."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= json_options(sub, f"{prefix} {name}".strip())
        elif "--json" in action.option_strings:
            found[prefix] = action
    return found


def commands_with_json(parser: argparse.ArgumentParser) -> set[str]:
    return set(json_options(parser))


def test_every_json_command_is_covered():
    assert commands_with_json(build_parser()) == set(UNPRIVILEGED) | PRIVILEGED


def test_every_json_option_is_the_shared_one():
    """One ``--json PATH`` (``argtypes.add_json``): the same metavar and help everywhere,
    but where a subcommand writes something other than its result (status: a snapshot)."""
    options = json_options(build_parser())
    helps = {name: (o.metavar, o.dest, o.help) for name, o in options.items()}
    own = {"status": "write one snapshot as JSON (- = stdout)"}
    assert helps == {name: ("PATH", "json", own.get(name, JSON_HELP)) for name in options}


def test_only_add_json_adds_the_option():
    """No subcommand adds ``--json`` by hand: every ``add_argument("--json", ...)`` in
    the source is the one in ``argtypes.add_json``."""
    found = []
    for top in ("grouper", "common", "pda", "workloads", "agent", "coordinator", "simulator",
                "trafficgen", "topologies", "experiments"):  # fmt: skip
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "attr", None) == "add_argument"
                    and any(getattr(a, "value", None) == "--json" for a in node.args)
                ):
                    found.append(str(path.relative_to(ROOT)))
    assert found == ["grouper/cli/argtypes.py"]


@pytest.mark.parametrize("command", sorted(UNPRIVILEGED))
def test_whole_stdout_is_one_json_object(command):
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", *command.split(), *UNPRIVILEGED[command]]
        + ["--json", "-"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert isinstance(json.loads(proc.stdout), dict)


def test_chatter_on_fd_1_goes_to_stderr():
    """A library writing straight to file descriptor 1 (as HiGHS's banner does) and a
    stray print() both land on standard error; the JSON alone on standard output."""
    code = textwrap.dedent(
        """
        import os, subprocess
        from grouper.common.output import stdout_reserved_for_json, write_json
        with stdout_reserved_for_json(True):
            os.write(1, b"banner from C\\n")
            print("stray print")
            subprocess.run(["echo", "child process"])
            write_json({"ok": 1}, "-")
        print("after")
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "after"
    assert json.loads(proc.stdout.rsplit("after", 1)[0]) == {"ok": 1}
    for chatter in ("banner from C", "stray print", "child process"):
        assert chatter in proc.stderr
