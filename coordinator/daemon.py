"""``grouper coordinator``: one per cluster. SIGHUP reloads the config (a bad one is
refused and the last good one keeps running); SIGTERM/SIGINT shut down gracefully."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import TextIO

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from grouper.common.binding import EXCLUSIVE_PORT, bind
from grouper.common.cluster_config import load_cluster_config
from grouper.common.errors import ConfigError
from grouper.coordinator.loop import Coordinator
from grouper.coordinator.metrics import CoordinatorMetrics
from grouper.coordinator.trace import CycleTrace
from grouper.pda.order import warm_up

log = logging.getLogger("grouper.coordinator")


async def serve(
    config_path: str, listen: str | None, metrics_addr: str | None, trace: TextIO | None = None
) -> None:
    cfg = load_cluster_config(config_path)
    warm_up()  # compile PDA before serving: the first plan must not wait for it
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    metrics = CoordinatorMetrics()
    coord = Coordinator(cfg, metrics)
    coord.trace = CycleTrace(trace) if trace is not None else None

    def reload() -> None:
        try:
            new = load_cluster_config(config_path)
        except ConfigError as exc:
            metrics.errors.labels("config_reload").inc()
            log.error("config reload refused, keeping the last good config: %s", exc)
            return
        coord.reload(new)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, reload)
    server = grpc.aio.server(options=EXCLUSIVE_PORT)
    health_svc = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_svc, server)
    bind(
        lambda: server.add_insecure_port(listen or cfg.coordinator_listen),
        "--listen" if listen else "coordinator.listen",
        listen or cfg.coordinator_listen,
    )
    bind(
        lambda: metrics.serve(metrics_addr or cfg.coordinator_metrics),
        "--metrics" if metrics_addr else "metrics.coordinator",
        metrics_addr or cfg.coordinator_metrics,
    )
    try:
        await server.start()
        await health_svc.set("", health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "coordinator for %s: %d hosts, policy %s, period %.2fs",
            cfg.cluster,
            len(cfg.hosts),
            cfg.scheduling.policy,
            cfg.scheduling.period,
        )
        await coord.run(stop)
    finally:
        log.info("shutting down")
        await health_svc.enter_graceful_shutdown()
        await server.stop(grace=1.0)
        await coord.close()


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    trace = None
    if args.trace:
        try:
            trace = open(args.trace, "a")  # noqa: SIM115 - closed below
        except OSError as exc:
            raise ConfigError("--trace", f"cannot open {args.trace!r}: {exc.strerror}") from None
    try:
        asyncio.run(serve(args.config, args.listen, args.metrics, trace))
    finally:
        if trace is not None:
            trace.close()
    return 0
