"""Command-line options of ``grouper agent`` (no heavy imports: parsed on every CLI call;
the agent reads them in ``agent.daemon.options_from``)."""

from __future__ import annotations

import argparse

from grouper.cli import argtypes as T


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="cluster YAML")
    p.add_argument("--host", required=True, help="this host's name in the config")
    p.add_argument("--nic", type=T.interface, help="override the host's NIC")
    p.add_argument(
        "--listen", type=T.address(), help="coordinator API address (HOST:PORT or unix:PATH)"
    )
    p.add_argument("--socket", help="registry Unix socket path")
    p.add_argument("--jobs-dir", help="directory of JSON-lines job event files")
    p.add_argument("--state-file", help="registry state file")
    p.add_argument(
        "--backend", choices=("auto", "prio", "htb"), help="qdisc backend (default: agent.backend)"
    )
    p.add_argument(
        "--multiqueue",
        choices=("per-queue", "single"),
        help="multi-queue NICs: a band qdisc per TX queue (default) or one root over all",
    )
    p.add_argument("--metrics-port", type=T.PORT, help="Prometheus port (0 = off)")
    p.add_argument("--link-mbps", type=T.real(0, 1e7, lo_open=True), help="override the link rate")
    p.add_argument("--log-level", type=T.log_level, default="INFO", help=T.LOG_LEVEL_HELP)
