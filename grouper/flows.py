"""The flow id contract shared by agents and the coordinator."""

from __future__ import annotations


def flow_id(cojob: str, job: str, dst_host: str, dst_port: int, src_port: int = 0) -> str:
    """``<cojob>/<job>/<dst_host>:<dst_port>``, or ``:s<src_port>`` when matched by source."""
    port = str(dst_port) if dst_port else f"s{src_port}"
    return f"{cojob}/{job}/{dst_host}:{port}"
