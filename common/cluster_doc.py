"""Cluster configs written by code (tests, benches, the emulation): one factory instead
of dict literals per file.

``cluster_doc`` builds the mapping ``grouper.common.cluster_config`` reads; ``write_cluster``
writes it as YAML. A host is ``(name, address, nic)`` with optional ``link_mbps`` and
``agent`` endpoint; without an endpoint its agent listens on a Unix socket named after
the host in ``sockets``. Any other section (``scheduling``, ``failure``, ``agent``,
``coordinator``, ``metrics``, ``queues``, ``tls``, ...) is passed as a keyword.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

Host = tuple  # (name, address, nic[, link_mbps[, agent]])


def cluster_doc(
    hosts: list[Host], *, cluster: str = "test", sockets: Path | None = None, **sections: Any
) -> dict[str, Any]:
    entries = []
    for h in hosts:
        name, address, nic = h[:3]
        entry: dict[str, Any] = {"name": name, "address": address, "nic": nic}
        if len(h) > 3 and h[3] is not None:
            entry["link_mbps"] = h[3]
        if len(h) > 4:
            entry["agent"] = h[4]
        elif sockets is not None:
            entry["agent"] = f"unix:{sockets}/{name}-agent.sock"
        entries.append(entry)
    return {"cluster": cluster, "hosts": entries, **sections}


def write_cluster(path: Path, hosts: list[Host], **kw: Any) -> Path:
    """``cluster_doc`` as YAML at ``path``; agents' sockets beside it unless given."""
    kw.setdefault("sockets", path.parent)
    path.write_text(yaml.safe_dump(cluster_doc(hosts, **kw)))
    return path
