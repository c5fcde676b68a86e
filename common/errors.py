"""The one error type for bad input (configs, workloads, plans, RPCs).

Messages name the path of the offending field, e.g. ``cojobs[1].jobs[0].workers: required``.
"""

from __future__ import annotations

from typing import Any

MAX_PATH = 120
MAX_PROBLEM = 200


def short(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters: messages quote an excerpt, never a
    whole hostile value."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _one_line(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class ConfigError(ValueError):
    """Invalid input; ``path`` locates the field, ``problem`` says what is wrong. The
    message is always one line of bounded length, whatever the input held."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = _one_line(path, MAX_PATH)
        self.problem = _one_line(problem, MAX_PROBLEM)
        super().__init__(f"{self.path}: {self.problem}" if self.path else self.problem)
