"""Command-line options of ``grouper agent`` (no heavy imports: parsed on every CLI call)."""

from __future__ import annotations

import argparse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", required=True, help="cluster YAML")
    p.add_argument("--host", required=True, help="this host's name in the config")
    p.add_argument("--nic", help="override the host's NIC")
    p.add_argument("--listen", help="coordinator API address (HOST:PORT or unix:PATH)")
    p.add_argument("--socket", help="registry Unix socket path")
    p.add_argument("--jobs-dir", help="directory of JSON-lines job event files")
    p.add_argument("--state-file", help="registry state file")
    p.add_argument("--backend", choices=("auto", "prio", "htb"))
    p.add_argument(
        "--multiqueue",
        choices=("per-queue", "single"),
        help="multi-queue NICs: a band qdisc per TX queue (default) or one root over all",
    )
    p.add_argument("--metrics-port", type=int, help="Prometheus port (0 = off)")
    p.add_argument("--link-mbps", type=float, help="override the link rate")
    p.add_argument("--log-level", default="INFO")
