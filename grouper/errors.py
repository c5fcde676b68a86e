"""The one error type for bad input (configs, workloads, plans, RPCs).

Messages name the path of the offending field, e.g. ``cojobs[1].jobs[0].workers: required``.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """Invalid input; ``path`` locates the field, ``problem`` says what is wrong."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)
