"""A training-like job process for discovery tests (run inside a namespace).

python tests/job_tool.py ADDR    for every stdin line "PORT SECONDS": connect to
    ADDR:PORT, print {"sport", "t0"} (t0 just before connect()), send 1 KiB writes for
    SECONDS, print {"done": sport, "bytes": n} and close. Under ``grouper run`` it also
    counts one iteration per write with ``grouper.client.Job.from_env()``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def main() -> None:
    addr = sys.argv[1]
    job = None
    if os.environ.get("GROUPER_JOB"):
        from grouper.client import Job

        job = Job.from_env()
        job.start()
    for line in sys.stdin:
        port, seconds = line.split()
        s = socket.socket()
        t0 = time.time()
        s.connect((addr, int(port)))
        print(json.dumps({"sport": s.getsockname()[1], "t0": t0}), flush=True)
        end, sent, chunk = time.monotonic() + float(seconds), 0, b"x" * 1024
        while time.monotonic() < end:
            sent += s.send(chunk)
            if job is not None:
                job.step()
            time.sleep(0.0005)
        s.close()
        print(json.dumps({"done": port, "bytes": sent}), flush=True)
    if job is not None:
        job.close()


if __name__ == "__main__":
    main()
