"""VM tests: the kernel layer on Debian 12's stock kernel, in QEMU. Root only."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.layers import skip_layer
from tests.vm.launcher import kernel_missing


def pytest_collection_modifyitems(config, items):
    if not any("tests/vm" in str(item.fspath) for item in items):
        return
    reason = None
    if os.geteuid() != 0:
        reason = "VM tests need root (the guest shares / and runs the kernel layer as root)"
    elif not shutil.which("qemu-system-x86_64") or not Path("/bin/busybox").exists():
        reason = "VM tests need qemu-system-x86 and busybox-static (scripts/setup-system.sh)"
    else:
        reason = kernel_missing()
    skip_layer(items, "vm", reason)


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    """The guest's measured slowdown, the bounds it set and the layer's time."""
    from tests.vm.test_stock_kernel import _said

    if _said:
        terminalreporter.write_sep("-", "stock-kernel VM")
        for line in _said:
            terminalreporter.write_line(line)
