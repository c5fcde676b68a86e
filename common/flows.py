"""The flow and job id contract shared by agents, the coordinator and the scheduler."""

from __future__ import annotations

# a job's weight: past it, float sums of weighted loads would lose the light ones
MAX_WEIGHT = 1e6
ARCHS = ("ps", "ring", "flows")  # job architectures a registration or workload may name


def flow_id(cojob: str, job: str, dst_host: str, dst_port: int, src_port: int = 0) -> str:
    """``<cojob>/<job>/<dst_host>:<dst_port>``, or ``:s<src_port>`` when matched by source,
    or ``:*`` for a host flow (every connection of the job to ``dst_host``)."""
    port = str(dst_port) if dst_port else f"s{src_port}" if src_port else "*"
    return f"{cojob}/{job}/{dst_host}:{port}"


def host_flow_id(cojob: str, job: str, dst_host: str) -> str:
    """The id of a host flow: every connection of the job to ``dst_host``."""
    return flow_id(cojob, job, dst_host, 0)


def parse_host_flow(fid: str) -> tuple[str, str, str] | None:
    """(cojob, job, dst_host) of a host flow id, else None."""
    if not fid.endswith(":*"):
        return None
    parts = fid[:-2].split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def parse_port_flow(fid: str) -> tuple[str, int, bool] | None:
    """(dst_host, port, by_source) of a flow id matched by a port, else None."""
    head, sep, port = fid.rpartition(":")
    parts = head.split("/")
    if not sep or len(parts) != 3 or not all(parts):
        return None
    by_source = port.startswith("s")
    digits = port[1:] if by_source else port
    if not digits.isascii() or not digits.isdigit() or not 0 < int(digits) < 65536:
        return None
    return parts[2], int(digits), by_source


INBOUND_PREFIX = "inbound:"


def inbound_key(src_host: str, port: int, by_source: bool) -> str:
    """How a host plan names an inbound flow (never a flow id: those hold '/')."""
    return f"{INBOUND_PREFIX}{src_host}:{'s' if by_source else ''}{port}"


def parse_inbound_key(key: str) -> tuple[str, int, bool] | None:
    """(src_host, port, by_source) of an ``inbound_key``, else None."""
    if not key.startswith(INBOUND_PREFIX):
        return None
    host, _, port = key[len(INBOUND_PREFIX) :].rpartition(":")
    by_source = port.startswith("s")
    return host, int(port[1:] if by_source else port), by_source
