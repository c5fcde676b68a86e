"""Who may register jobs with a host's agent, and how much one user may ask for:
the cluster YAML's ``agent.registry`` (checked by ``grouper check-config``).

    agent:
      registry:
        group: ""              # "": every local user may connect (socket mode 0666);
                               # a group name: only its members and root (0660)
        max_weight: 1          # the largest weight an ordinary user's job may have
        admin_group: ""        # members may give weights up to the protocol's limit
        max_jobs_per_user: 256
        max_pids_per_job: 1024
        calls_per_second: 100  # per user; a burst of as many is allowed

Whoever connects, the agent takes the caller's identity from the socket (peer
credentials) and lets it name only its own processes, cgroup and jobs; root may name
any, and is bound by none of the per-user limits.
"""

from __future__ import annotations

import grp
from dataclasses import dataclass
from typing import Any

from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.common.flows import MAX_WEIGHT

KEYS = (
    "group",
    "max_weight",
    "admin_group",
    "max_jobs_per_user",
    "max_pids_per_job",
    "calls_per_second",
)


@dataclass(frozen=True)
class RegistryPolicy:
    group: str = ""
    max_weight: float = 1.0
    admin_group: str = ""
    max_jobs_per_user: int = 256
    max_pids_per_job: int = 1024
    calls_per_second: float = 100.0

    @property
    def socket_mode(self) -> int:
        return 0o660 if self.group else 0o666

    def socket_gid(self) -> int | None:
        return _gid(self.group, "agent.registry.group") if self.group else None

    def admin_gid(self) -> int | None:
        return _gid(self.admin_group, "agent.registry.admin_group") if self.admin_group else None


def _gid(name: str, path: str) -> int:
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise ConfigError(path, f"no group {name[:40]!r} on this host") from None


def parse_registry_policy(raw: Any) -> RegistryPolicy:
    m = v.mapping(raw, "agent.registry", KEYS)
    d = RegistryPolicy()
    p = "agent.registry."
    return RegistryPolicy(
        v.string(m.get("group", d.group), p + "group") if m.get("group") else "",
        v.number(
            m.get("max_weight", d.max_weight), p + "max_weight", positive=True, maximum=MAX_WEIGHT
        ),  # fmt: skip
        v.string(m.get("admin_group"), p + "admin_group") if m.get("admin_group") else "",
        v.integer(
            m.get("max_jobs_per_user", d.max_jobs_per_user),
            p + "max_jobs_per_user",
            minimum=1,
            maximum=100_000,
        ),  # fmt: skip
        v.integer(
            m.get("max_pids_per_job", d.max_pids_per_job),
            p + "max_pids_per_job",
            minimum=1,
            maximum=1_000_000,
        ),  # fmt: skip
        v.number(
            m.get("calls_per_second", d.calls_per_second),
            p + "calls_per_second",
            positive=True,
            maximum=1e6,
        ),  # fmt: skip
    )
