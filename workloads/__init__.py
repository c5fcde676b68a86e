"""Workloads: YAML files or ``builtin:NAME``, parsed into :mod:`pda.model` objects."""

from grouper.workloads.schema import Workload, load_workload, parse_workload

__all__ = ["Workload", "load_workload", "parse_workload"]
