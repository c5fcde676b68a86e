"""``grouper order --workload builtin:fig3`` as a whole process: the environment's
``grouper`` console script from its start to its exit (start-up and imports count)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class OrderFig3:
    number = 1
    repeat = (4, 6, 20.0)
    rounds = 2
    warmup_time = 0.0  # one run, untimed, warms the page cache (number = 1: see asv)
    timeout = 120

    def time_order_fig3(self) -> None:
        grouper = Path(sys.executable).with_name("grouper")
        subprocess.run(
            [str(grouper), "order", "--workload", "builtin:fig3", "--json", "-"],
            stdout=subprocess.DEVNULL,
            check=True,
        )
