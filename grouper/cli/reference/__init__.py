"""The generated reference pages of the documentation site (docs/reference/), built from
the code at every ``make docs`` and never committed: the cluster config and workload
keys from their parsers, the command line from argparse, the metrics from where they
are declared, the gRPC API from ``proto/``."""

from __future__ import annotations

from collections.abc import Callable


def pages() -> dict[str, Callable[[], str]]:
    """File name under docs/reference/ -> the function that writes its Markdown."""
    from grouper.cli.reference.cli import cli_page
    from grouper.cli.reference.grpc import grpc_page
    from grouper.cli.reference.metrics import metrics_page
    from grouper.cli.reference.schema import config_page, workload_page

    return {
        "config.md": config_page,
        "cli.md": cli_page,
        "metrics.md": metrics_page,
        "grpc.md": grpc_page,
        "workload-format.md": workload_page,
    }
