"""``grouper status``: one screen of what the cluster's scheduling is doing.

Every agent is asked for its report (``Collect`` with the plan in force) over the channel
the coordinator itself uses (``coordinator.links.channel_for``: mutual TLS with the
config's ``tls:`` identity, which agents take reports from); the coordinator's own view
(agents up, the global order, plans pushed, cycles, errors) is read from its Prometheus
endpoint (``metrics.coordinator``; ``--coordinator`` to reach it from elsewhere). Two
reports ``--interval`` apart give per-band throughput and drop rates. Refreshes in place
until Ctrl-C on a terminal; ``--once`` or ``--json PATH`` (``-`` = stdout) take one
snapshot. Rendering (rich): ``grouper.cli.status_view``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from grouper.cli import argtypes as T

if TYPE_CHECKING:
    from grouper.common.cluster_config import ClusterConfig, HostConfig

METRIC = "grouper_coordinator_"
MAX_METRICS_BYTES = 8 << 20


def add_status(add: T.Add) -> None:
    """Registers ``grouper status``."""
    st = add(
        "status",
        _cmd_status,
        "one screen of the cluster: cojobs, stages and jobs, the global order and each "
        "host flow's band, per-band throughput and drops, plan versions, agents up, "
        "admission (refreshing; --json for scripts)",
    )
    st.add_argument("--config", required=True, metavar="CLUSTER.yaml", help="cluster YAML")
    st.add_argument(
        "--coordinator",
        type=T.address(),
        help="the coordinator's Prometheus address HOST:PORT (default: metrics.coordinator, "
        "0.0.0.0 read as this machine)",
    )
    st.add_argument(
        "--interval",
        type=T.real(0.2, 3600),
        default=2.0,
        help="seconds between refreshes, and between the two reports rates come from",
    )
    st.add_argument(
        "--timeout", type=T.real(0.1, 60), default=2.0, help="seconds to wait for each agent"
    )
    st.add_argument("--once", action="store_true", help="print one snapshot and exit")
    T.add_json(st, "write one snapshot as JSON (- = stdout)")


def _cmd_status(args: argparse.Namespace) -> int:
    from grouper.cli.status_view import print_once, snapshot, watch
    from grouper.common.cluster_config import load_cluster_config
    from grouper.common.output import write_json

    cfg = load_cluster_config(args.config)
    coord = args.coordinator or local_address(cfg.coordinator_metrics)
    prev = gather(cfg, coord, args.timeout)
    if args.json is not None or args.once or not sys.stdout.isatty():
        time.sleep(args.interval)
        snap = snapshot(cfg, prev, gather(cfg, coord, args.timeout))
        if args.json is not None:
            write_json(snap, args.json)
        else:
            print_once(snap)
        return 0

    def snapshots() -> Iterator[dict[str, Any]]:
        nonlocal prev
        while True:
            time.sleep(args.interval)
            cur = gather(cfg, coord, args.timeout)
            yield snapshot(cfg, prev, cur)
            prev = cur

    try:
        watch(snapshots())
    except KeyboardInterrupt:
        pass
    return 0


def local_address(address: str) -> str:
    """A listening address as a client reaches it from the same machine ("" if off)."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return ""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host in ("[::]", "::"):
        host = "[::1]"
    return f"{host}:{port}"


def gather(cfg: ClusterConfig, coordinator: str, timeout: float) -> dict[str, Any]:
    """Raw reports: every agent's, and the coordinator's metrics, with the time taken."""
    at = time.monotonic()
    hosts = asyncio.run(_collect_all(cfg, timeout))
    return {"at": at, "hosts": hosts, "coordinator": coordinator_metrics(coordinator, timeout)}


async def _collect_all(cfg: ClusterConfig, timeout: float) -> dict[str, dict[str, Any]]:
    results = await asyncio.gather(*(_collect(h, cfg, timeout) for h in cfg.hosts))
    return {h.name: r for h, r in zip(cfg.hosts, results, strict=True)}


async def _collect(host: HostConfig, cfg: ClusterConfig, timeout: float) -> dict[str, Any]:
    import grpc

    from grouper.coordinator.links import channel_for
    from grouper.v1 import agent_pb2 as pb
    from grouper.v1 import agent_pb2_grpc as pbg

    try:
        channel = channel_for(host, cfg)
    except OSError as exc:  # TLS files unreadable since the config was checked
        return {"up": False, "error": f"tls: {exc.strerror}"}
    try:
        stub = pbg.AgentStub(channel)
        report = await stub.Collect(pb.CollectRequest(with_plan=True), timeout=timeout)
    except grpc.aio.AioRpcError as exc:
        return {"up": False, "error": exc.code().name}
    finally:
        await channel.close()
    return {"up": True, "report": report_dict(report)}


def report_dict(r: Any) -> dict[str, Any]:
    return {
        "plan_version": r.plan_version,
        "priorities_active": r.priorities_active,
        "backend": r.backend,
        "bands": {
            b.band: {"bytes": b.bytes, "packets": b.packets, "drops": b.drops} for b in r.bands
        },
        "flows": [{"flow_id": f.flow_id, "band": f.band, "dscp": f.dscp} for f in r.flows],
        "jobs": [
            {
                "cojob": j.job.cojob_id,
                "job": j.job.job_id,
                "stages": list(j.job.stage_iterations),
                "stages_finished": j.stages_finished,
                "iterations_done": j.iterations_done,
                "finished": j.finished,
            }
            for j in r.jobs
        ],
    }


def coordinator_metrics(address: str, timeout: float) -> dict[str, Any]:
    """The coordinator's exported metrics, by name -> [(labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families

    if not address:
        return {"up": False, "error": "metrics.coordinator is off (port 0)"}
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout) as resp:
            text = resp.read(MAX_METRICS_BYTES).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return {"up": False, "address": address, "error": " ".join(str(reason).split())[:120]}
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name.startswith(METRIC):
                    samples.setdefault(s.name[len(METRIC) :], []).append((s.labels, s.value))
    except ValueError as exc:
        return {"up": False, "address": address, "error": f"unreadable metrics: {exc}"[:120]}
    return {"up": True, "address": address, "samples": samples}
