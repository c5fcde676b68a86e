"""What an emulation runs on: the leaf-spine a workload's ``topology:`` names, the queues
from ``--min-share`` and a calibrated ``--config``, the builtin experiments, and the
``--policies`` list (shared by ``grouper emulate`` and its real-framework variant)."""

from __future__ import annotations

from dataclasses import replace

from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig
from grouper.topologies.leafspine import LeafSpine
from grouper.workloads import load_workload
from grouper.workloads.model import Workload
from grouper.workloads.topology import leafspine_args

EXPERIMENTS = ("small", "testbed-mini")


def spec_of(wl: Workload, queues: QueueConfig) -> LeafSpine:
    kind, _, arg = (wl.topology or "").partition(":")
    try:
        if kind != "leafspine":
            raise ValueError(kind)
        a = leafspine_args(arg)
        if a.total is not None:
            raise ValueError(arg)
    except ValueError:
        raise ConfigError(
            "topology", "an experiment needs topology: leafspine:L,S,H,GBPS[,uplink=GBPS]"
        ) from None
    uplink = a.uplink_gbps * 1000 if a.uplink_gbps is not None else None
    return LeafSpine(a.leaves, a.spines, a.per_leaf, a.gbps * 1000, queues, uplink)


def emulation_queues(args: object) -> QueueConfig:
    """The emulated cluster's queues: ``--min-share``, and with ``--config`` the
    contention constants measured on this fabric (``grouper calibrate --write``)."""
    queues = QueueConfig(min_share=args.min_share)
    if getattr(args, "config", None):
        from grouper.common.cluster_config import load_cluster_config

        queues = replace(queues, admission=load_cluster_config(args.config).queues.admission)
    return queues


def load_experiment(name: str) -> Workload:
    if name.startswith("builtin:"):
        key = name.split(":", 1)[1]
        if key not in EXPERIMENTS:
            raise ConfigError(
                "--experiment", f"unknown builtin {key!r} (known: {', '.join(EXPERIMENTS)})"
            )
    return load_workload(name)


def parse_policies(text: str, known: tuple[str, ...]) -> list[str]:
    """``--policies``: a comma-separated list of known policies, at least one."""
    policies = [p for p in text.split(",") if p]
    for p in policies:
        if p not in known:
            raise ConfigError(
                "--policies", f"unknown policy {p[:20]!r} (known: {', '.join(known)})"
            )
    if not policies:
        raise ConfigError("--policies", "name at least one policy")
    return policies
