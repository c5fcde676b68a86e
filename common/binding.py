"""Daemons bind their ports before they touch anything: a port in use (another agent
or coordinator on this host?) or an address this host does not have is refused as a
config error naming where the address came from."""

from __future__ import annotations

from collections.abc import Callable

from grouper.common.errors import ConfigError

# gRPC binds with SO_REUSEPORT by default: a second agent or coordinator on the same
# port would start and share its connections. Daemons' servers turn it off.
EXCLUSIVE_PORT = [("grpc.so_reuseport", 0)]


def bind(listen: Callable[[], object], where: str, address: str) -> None:
    """Run ``listen`` (which binds ``address``); a failure becomes one ConfigError."""
    try:
        listen()
    except (RuntimeError, OSError) as exc:  # gRPC's "Failed to bind"; socket errors
        reason = getattr(exc, "strerror", None) or "in use, or not an address of this host"
        raise ConfigError(where, f"cannot listen on {address!r} ({reason})") from None
