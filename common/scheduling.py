"""Queue and admission settings read from plain mappings (pure: no files).

The cluster config (``queues:``, ``admission:``) and a workload's ``scheduling:``
section describe the same things; both read them here, with field paths under
``prefix`` in their errors.
"""

from __future__ import annotations

from typing import Any

from grouper.common import validate as v
from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig

# the scheduling policies (pda/policies.py), named here so that the cluster config can
# check a name without loading the planner
POLICIES = ("fs", "baraat", "sincronia", "sptf", "grouper", "grouper-offline")


def parse_admission(raw: Any, prefix: str = "") -> ContentionModel | None:
    """``{enabled, a, b, eta}`` -> the contention model, or None when disabled."""
    path = f"{prefix}admission"
    m = v.mapping(raw, path, ("enabled", "a", "b", "eta"))
    enabled = v.boolean(m.get("enabled", True), f"{path}.enabled")
    d = ContentionModel()
    a = v.number(m.get("a", d.a), f"{path}.a", minimum=0)
    b = v.number(m.get("b", d.b), f"{path}.b", positive=True)
    eta = v.number(m.get("eta", d.eta), f"{path}.eta", minimum=0)
    return ContentionModel(a, b, eta) if enabled else None


def parse_queues(raw: Any, admission: ContentionModel | None, prefix: str = "") -> QueueConfig:
    """``{count, reserved, scavenger, dscp, min_share}`` -> QueueConfig."""
    path = f"{prefix}queues"
    m = v.mapping(raw, path, ("count", "reserved", "scavenger", "dscp", "min_share"))
    count = v.integer(m.get("count", 8), f"{path}.count", minimum=2)
    reserved = tuple(
        v.integer(x, f"{path}.reserved[{i}]", minimum=0)
        for i, x in enumerate(v.sequence(m.get("reserved", [0]), f"{path}.reserved"))
    )
    scav_raw = m.get("scavenger", -1)
    scavenger = None if scav_raw is None else v.integer(scav_raw, f"{path}.scavenger", minimum=-1)
    dscp = tuple(
        v.integer(x, f"{path}.dscp[{i}]", minimum=0)
        for i, x in enumerate(v.sequence(m.get("dscp", []), f"{path}.dscp"))
    )
    share = v.number(m.get("min_share", 0.001), f"{path}.min_share", positive=True)
    if sorted(set(reserved)) != list(range(len(reserved))):
        # control traffic above every data band: bands 0, 1, ... in any order, once each
        raise ConfigError(
            f"{path}.reserved",
            f"{list(reserved)[:8]} must be the top bands 0 to {len(reserved) - 1}, each once "
            "(a reserved band between data bands would split them)",
        )
    if scavenger is not None and scavenger not in (-1, count - 1):
        # waiting stages must sit below every data band, or they would pass them
        raise ConfigError(
            f"{path}.scavenger", f"must be the lowest band ({count - 1}) or -1, got {scavenger}"
        )
    try:
        return QueueConfig(count, reserved, scavenger, dscp, admission, share)
    except ConfigError as exc:
        mapped = {"queues": "count"}.get(exc.path, exc.path)
        raise ConfigError(f"{path}.{mapped}", exc.problem) from None
