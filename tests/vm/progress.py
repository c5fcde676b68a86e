"""A pytest plugin for the guest: one line per test, written as the test ends.

Loaded in the guest with ``-p tests.vm.progress``. It writes
``$GROUPER_VM_OUT/progress.jsonl``: first ``{"collected": [ids]}``, then per test
``{"test": id, "outcome": ..., "message": ..., "seconds": ...}`` as soon as its teardown
ends. The host reads it whether the guest finished or not, so a layer that runs out of
time still names what failed and what never finished (``read_progress``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

FILE = "progress.jsonl"
RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _write(record: dict) -> None:
    with open(Path(os.environ["GROUPER_VM_OUT"]) / FILE, "a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


_state: dict[str, dict] = {}


def pytest_collection_finish(session) -> None:  # noqa: ANN001
    _write({"collected": [item.nodeid for item in session.items]})


def _message(report) -> str:  # noqa: ANN001
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])
    return str(report.longrepr or "")


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    state = _state.setdefault(report.nodeid, {"outcome": "passed", "message": "", "s": 0.0})
    state["s"] += report.duration
    if RANK[report.outcome] > RANK[state["outcome"]]:
        state["outcome"] = report.outcome
        where = "" if report.when == "call" else f"in {report.when}: "
        state["message"] = where + _message(report)
    if report.when == "teardown":
        _write({"test": report.nodeid, "outcome": state["outcome"],
                "message": state["message"], "seconds": round(state["s"], 2)})  # fmt: skip
        del _state[report.nodeid]


@dataclass
class Progress:
    """What the guest's progress file says: every test collected, and those that ended."""

    collected: list[str] = field(default_factory=list)
    ended: dict[str, tuple[str, str, float]] = field(default_factory=dict)

    @property
    def unfinished(self) -> list[str]:
        return [t for t in self.collected if t not in self.ended]

    def problems(self) -> list[str]:
        """One line per test that did not pass (failed, skipped, never ended)."""
        lines = [
            f"{t}: {outcome}: {message[:300]}"
            for t, (outcome, message, _) in self.ended.items()
            if outcome != "passed"
        ]
        return lines + [f"{t}: did not finish" for t in self.unfinished]


def read_progress(out: Path) -> Progress | None:
    """The progress a guest wrote to ``out``, or None when it wrote none."""
    path = out / FILE
    if not path.exists():
        return None
    progress = Progress()
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short when the VM was ended mid-write
        if "collected" in record:
            progress.collected = record["collected"]
        elif "test" in record:
            progress.ended[record["test"]] = (
                record["outcome"],
                record["message"],
                record["seconds"],
            )
    return progress
