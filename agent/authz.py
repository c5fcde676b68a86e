"""Who may command an agent: only the coordinator's certificate identity.

Mutual TLS proves that a caller holds a certificate of the cluster's CA, and every
agent holds one too; membership alone would let any host reprioritise another's
traffic. Plans and event streams are therefore refused (PERMISSION_DENIED, logged with
the caller's names) unless the certificate names the configured coordinator, in its
common name or a DNS subject alternative name.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("grouper.agent")


def peer_names(context: Any) -> list[str]:
    auth = context.auth_context() or {}
    names = []
    for key in ("x509_common_name", "x509_subject_alternative_name"):
        for raw in auth.get(key, ()):
            name = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
            if name not in names:
                names.append(name)
    return names


def coordinator_only(name: str) -> Callable[[Any, str], str]:
    """``authorize(context, method)``: "" for the coordinator, else the refusal."""

    def authorize(context: Any, method: str) -> str:
        names = peer_names(context)
        if name in names:
            return ""
        who = ", ".join(n[:64] for n in names[:4]) or "a caller without a certificate name"
        err = f"{method}: {who} is not the coordinator {name!r}"
        log.warning("refused %s from %s (peer %s)", method, who, context.peer())
        return err

    return authorize
