"""Fixtures shared by the layers, and each layer's wall time in the summary."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tests.netns import NetPair


@pytest.fixture
def pair(request):
    """Two namespaces joined by a veth pair, removed whatever the test did.

    Parametrize indirectly with a TX queue count for a multi-queue veth, or with
    (TX queues, switch Mbit/s) for a shaped switch between the two.
    """
    param = getattr(request, "param", 1)
    txqueues, switch_mbps = param if isinstance(param, tuple) else (param, None)
    p = NetPair(txqueues=txqueues, switch_mbps=switch_mbps)
    try:
        yield p
    finally:
        p.close()


@pytest.fixture
def other_checkout(tmp_path: Path) -> Path:
    """A working directory holding a ``grouper/`` that fails on import, as a checkout of
    another commit would shadow the installed package: a command run from it must take
    grouper from where it was installed, and so must every interpreter it starts."""
    (tmp_path / "grouper").mkdir()
    (tmp_path / "grouper" / "__init__.py").write_text(
        "raise ImportError('the working directory\\'s grouper')\n"
    )
    return tmp_path


_layer_seconds: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report) -> None:  # noqa: ANN001
    """Setup, call and teardown of every test, summed by layer (``tests/<layer>/``):
    the tests run one after another, so the sums are the layers' wall times, session
    fixtures (a VM, a fabric) counted in the first test that uses them."""
    parts = report.nodeid.split("/")
    if len(parts) > 2 and parts[0] == "tests":
        _layer_seconds[parts[1]] += report.duration


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    if not _layer_seconds:
        return
    terminalreporter.write_sep("-", "wall time per layer")
    for layer, seconds in sorted(_layer_seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{layer:>12}  {seconds:7.1f} s")
    terminalreporter.write_line(f"{'all':>12}  {sum(_layer_seconds.values()):7.1f} s")
