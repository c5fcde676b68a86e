"""The flow id contract shared by agents and the coordinator."""

from __future__ import annotations


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
