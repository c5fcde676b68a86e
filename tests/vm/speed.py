"""A fixed workload timed the same way on the host and in the guest.

    python -m tests.vm.speed      # prints the workload's seconds (best of three)

The guest's tests spend their time starting Python processes, importing modules and
running Python code, so the workload is those: a pure-Python loop and a fresh
interpreter that imports what the agent's tests import. The best of three rounds keeps
a round slowed by something else from setting the figure.
"""

from __future__ import annotations

import subprocess
import sys
import time

ROUNDS = 3
LOOP = 400_000
IMPORTS = "import asyncio, json, subprocess, grpc, pyroute2"


def one_round() -> float:
    t0 = time.perf_counter()
    total = 0
    for i in range(LOOP):
        total += i * i % 7
    subprocess.run([sys.executable, "-c", IMPORTS], check=True)
    return time.perf_counter() - t0


def workload_seconds() -> float:
    one_round()  # the first import reads every file once (the guest's 9p root is cold)
    return min(one_round() for _ in range(ROUNDS))


if __name__ == "__main__":
    print(f"{workload_seconds():.4f}")
