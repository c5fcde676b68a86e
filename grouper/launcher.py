"""``grouper run``: start a command as (one participant of) a grouper job.

Registers the job with the local agent under this launcher's pid (the command and
every process it starts are its children, so the agent classifies all their
connections), runs the command with the job's ids in its environment
(``grouper.client.Job.from_env()``), forwards SIGINT, SIGTERM and SIGHUP to it, reports
this participant finished when it exits, whatever its status, and exits with that
status (128 + N after signal N, as a shell does). Several launchers of one job on a
host (``torchrun --no-python grouper run ...``, ``mpirun grouper run ...``) join the
same job; it ends with the last of them.

With no agent, or an agent that cannot be reached, the command runs unscheduled (one
warning): training never depends on the scheduler.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import warnings
from typing import Any

from common.errors import ConfigError
from common.flows import MAX_WEIGHT
from grouper import client

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def parse_stages(text: str) -> list[int]:
    out = []
    for i, part in enumerate(text.split(",")):
        try:
            n = int(part)
        except ValueError:
            raise ConfigError(f"--stages[{i}]", f"expected an integer, got {part[:20]!r}") from None
        if n < 1:
            raise ConfigError(f"--stages[{i}]", f"must be at least 1, got {n}")
        out.append(n)
    return out


def parse_flow(text: str, i: int) -> tuple[str, float]:
    host, sep, size = text.rpartition("=")
    try:
        value = float(size)
    except ValueError:
        value = float("nan")
    if not sep or not host or not value > 0 or value == float("inf"):
        raise ConfigError(f"--to[{i}]", f"expected HOST=BYTES_PER_ITERATION, got {text[:40]!r}")
    return host, value


def run(args: Any) -> int:
    if not args.command:
        raise ConfigError("COMMAND", "required after --")
    command = args.command[1:] if args.command[0] == "--" else args.command
    if not command:
        raise ConfigError("COMMAND", "required after --")
    stages = parse_stages(args.stages)
    if args.model_bytes is not None and not 0 <= args.model_bytes < float("inf"):
        raise ConfigError("--model-bytes", f"must be a finite number >= 0, got {args.model_bytes}")
    if not 0 < args.weight <= MAX_WEIGHT:
        raise ConfigError("--weight", f"must be in (0, {MAX_WEIGHT:g}], got {args.weight}")
    for name in ("cojob", "job"):
        value = getattr(args, name)
        if not value or "/" in value or ":" in value:
            raise ConfigError(f"--{name}", f"must be non-empty without '/' or ':', got {value!r}")
    job = client.Job(
        args.cojob,
        args.job,
        stages,
        arch=args.arch,
        model_bytes=args.model_bytes or 0.0,
        flows=[parse_flow(t, i) for i, t in enumerate(args.to or [])],
        socket=args.socket,
        weight=args.weight,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show
        job.start()  # registers with pids=[this launcher]; the command is our child
    if job.error:  # the agent is there and said no: the user's input, so stop here
        job.close()
        raise ConfigError("", f"agent refused the job: {job.error}")
    env = dict(os.environ)
    env.update(
        {
            client.ENV_COJOB: args.cojob,
            client.ENV_JOB: args.job,
            client.ENV_STAGES: ",".join(map(str, stages)),
            client.ENV_SOCKET: job.socket,
            client.ENV_MANAGED: "1" if job.active else "0",
        }
    )
    try:
        proc = subprocess.Popen(command, env=env)
    except OSError as exc:
        job.close()
        raise ConfigError("COMMAND", f"cannot run {command[0][:60]!r}: {exc.strerror}") from None
    old = {s: signal.signal(s, lambda n, _f: proc.send_signal(n)) for s in FORWARDED}
    try:
        status = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        job.close()  # this participant is done: JobFinished with our pid
    return 128 - status if status < 0 else status


def _show(message: Any, category: Any, *_: Any, **__: Any) -> None:
    print(f"grouper run: warning: {message}", file=sys.stderr)
