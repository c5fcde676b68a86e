"""A user's training job for the Slurm layer: one rank of a TCP ring, as ``srun`` starts
it (rank and size from ``SLURM_PROCID`` and ``SLURM_NTASKS``), under ``grouper run``.

python ring.py PORT BYTES ITERATIONS ADDR0 ADDR1 ...

Rank r listens on ADDRr:PORT and connects to the next rank's address. Each iteration it
sends BYTES to the next rank while it receives BYTES from the previous one, then counts
the iteration with ``grouper.client.Job.from_env()`` (the job's progress, and its stage
ends, reach the agent). Needs only the standard library and grouper-client, as a user's
script in a training environment would.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

CHUNK = 64 * 1024


def connect(addr: str, port: int, timeout: float = 60.0) -> socket.socket:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return socket.create_connection((addr, port), timeout=10)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def receive(conn: socket.socket, n: int) -> None:
    while n > 0:
        got = conn.recv(min(CHUNK, n))
        if not got:
            raise ConnectionError("the previous rank closed the ring")
        n -= len(got)


def main() -> None:
    port, nbytes, iterations = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    addrs = sys.argv[4:]
    rank, size = int(os.environ["SLURM_PROCID"]), int(os.environ["SLURM_NTASKS"])
    listener = socket.create_server((addrs[rank], port))
    nxt = connect(addrs[(rank + 1) % size], port)
    prev, _ = listener.accept()
    job = None
    if os.environ.get("GROUPER_JOB"):
        from grouper.client import Job

        job = Job.from_env()
        job.start()
    payload = b"x" * CHUNK
    for _ in range(iterations):
        sender = threading.Thread(target=lambda: [nxt.sendall(payload[: min(CHUNK, nbytes - i)])
                                                  for i in range(0, nbytes, CHUNK)])  # fmt: skip
        sender.start()
        receive(prev, nbytes)
        sender.join()
        if job is not None:
            job.step()
    nxt.close()
    prev.close()
    if job is not None:
        job.close()
    print(f"rank {rank} done {iterations} iterations", flush=True)


if __name__ == "__main__":
    main()
