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

Part of the ``grouper-client`` distribution (see ``client/``): it imports nothing of ours
but :mod:`grouper.client`. The full command line (:mod:`grouper.cli`) and the client's
own console script (:mod:`grouper.client_main`) both take ``grouper run`` from here.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import warnings
from typing import Any

from grouper import client

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
MAX_WEIGHT = 1e6  # the agent's limit (common.flows.MAX_WEIGHT; a unit test keeps them equal)


class UsageError(ValueError):
    """Bad input to ``grouper run``: ``path: problem``, one line (the full command line
    turns it into its ConfigError, exit 2)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}" if path else problem)


def add_arguments(ru: argparse.ArgumentParser) -> None:
    """The options of ``grouper run`` (here, so the client's own script has them)."""
    ru.add_argument("--cojob", required=True, help="the search (cojob) id")
    ru.add_argument("--job", required=True, help="this job's id (the same on every host)")
    ru.add_argument("--stages", required=True, help="iterations per stage, e.g. 500,1000,2000")
    ru.add_argument(
        "--arch",
        default="flows",
        choices=("flows", "ps", "ring"),
        help="the job's traffic: parameter server, ring all-reduce, or the flows measured",
    )
    ru.add_argument(
        "--model-bytes", type=ascii_float, help="gradient bytes per iteration (a prior)"
    )
    ru.add_argument(
        "--to",
        action="append",
        metavar="HOST=BYTES",
        help="bytes per iteration this host sends to HOST (repeatable; else measured)",
    )
    ru.add_argument(
        "--weight",
        type=ascii_float,
        default=1.0,
        help="the job's importance: a stage weighs as its heaviest job (default 1)",
    )
    ru.add_argument(
        "--socket", help="agent socket (default $GROUPER_AGENT_SOCKET or /run/grouper/agent.sock)"
    )
    ru.add_argument(
        "--cgroup",
        default="auto",
        help="the job's cgroup: auto (the agent makes one and the command runs in it; "
        "pids where the host cannot), self (this launcher's own, e.g. a Slurm step or a "
        "pod), a cgroup v2 path, or none (pids only)",
    )
    ru.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")


def ascii_float(text: str) -> float:
    """A number in ASCII digits: ``float()`` also reads Arabic-Indic and other Unicode
    digits, which nothing else in a job's tooling would."""
    if not text.isascii():
        raise argparse.ArgumentTypeError(f"expected a number in ASCII digits, got {text[:20]!r}")
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text[:20]!r}") from None


def parse_stages(text: str) -> list[int]:
    out = []
    for i, part in enumerate(text.split(",")):
        try:
            if not part.strip().isascii():
                raise ValueError(part)
            n = int(part)
        except ValueError:
            raise UsageError(f"--stages[{i}]", f"expected an integer, got {part[:20]!r}") from None
        if n < 1:
            raise UsageError(f"--stages[{i}]", f"must be at least 1, got {n}")
        out.append(n)
    return out


def parse_cgroup(text: str) -> str:
    """``--cgroup``: the cgroup path to register ("" for auto and none)."""
    if text in ("auto", "none"):
        return ""
    if text == "self":
        try:
            with open("/proc/self/cgroup") as fh:
                lines = fh.read().splitlines()
        except OSError:
            lines = []
        own = [ln[3:] for ln in lines if ln.startswith("0::")]
        if not own or own[0] in ("", "/"):
            raise UsageError("--cgroup", "self: this process is in no cgroup v2 of its own")
        return job_level(own[0])
    if not text.startswith("/"):
        raise UsageError("--cgroup", f"auto, self, none or a path from '/', got {text[:40]!r}")
    return text


def job_level(path: str) -> str:
    """The part of a process's cgroup that is its job's, where a cluster manager's
    layout says so: a Slurm step (``.../job_<id>/step_<n>``, whose tasks are the ranks)
    or a Kubernetes pod (``...-pod<uid>.slice``, whose containers are the job's); else
    the cgroup itself (a systemd unit, a scope)."""
    parts = path.strip("/").split("/")
    for i, part in enumerate(parts):
        step = part.startswith("step_") and i > 0 and parts[i - 1].startswith("job_")
        pod = part.startswith("kubepods") and "-pod" in part and part.endswith(".slice")
        if step or pod:
            return "/" + "/".join(parts[: i + 1])
    return path


def parse_flow(text: str, i: int) -> tuple[str, float]:
    host, sep, size = text.rpartition("=")
    try:
        value = float(size) if size.isascii() else float("nan")
    except ValueError:
        value = float("nan")
    if not sep or not host or not value > 0 or value == float("inf"):
        raise UsageError(f"--to[{i}]", f"expected HOST=BYTES_PER_ITERATION, got {text[:40]!r}")
    return host, value


def run(args: Any) -> int:
    """``grouper run``: register the job with the host's agent, run the command as our
    child with the job in its environment, and end the job when the command ends."""
    command, stages, cgroup = _checked(args)
    job = _register(args, stages, cgroup, own=args.cgroup == "auto")
    if job.error.startswith("own_cgroup:"):  # the host cannot: known by pids instead
        job.close()
        job = _register(args, stages, cgroup, own=False)
    if job.error:  # the agent is there and said no: the user's input, so stop here
        job.close()
        raise UsageError("", f"agent refused the job: {job.error}")
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
        raise UsageError("COMMAND", f"cannot run {command[0][:60]!r}: {exc.strerror}") from None
    old = {s: signal.signal(s, lambda n, _f: proc.send_signal(n)) for s in FORWARDED}
    try:
        status = proc.wait()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        job.close()  # this participant is done: JobFinished with our pid
    return 128 - status if status < 0 else status


def _checked(args: Any) -> tuple[list[str], list[int], str]:
    """The command, the stages and the cgroup, every flag checked before anything runs."""
    if not args.command:
        raise UsageError("COMMAND", "required after --")
    command = args.command[1:] if args.command[0] == "--" else args.command
    if not command:
        raise UsageError("COMMAND", "required after --")
    stages = parse_stages(args.stages)
    if args.model_bytes is not None and not 0 <= args.model_bytes < float("inf"):
        raise UsageError("--model-bytes", f"must be a finite number >= 0, got {args.model_bytes}")
    if not 0 < args.weight <= MAX_WEIGHT:  # NaN included
        raise UsageError("--weight", f"must be in (0, {MAX_WEIGHT:g}], got {args.weight}")
    for name in ("cojob", "job"):
        value = getattr(args, name)
        if not value or "/" in value or ":" in value:
            raise UsageError(f"--{name}", f"must be non-empty without '/' or ':', got {value!r}")
    return command, stages, parse_cgroup(args.cgroup)


def _register(args: Any, stages: list[int], cgroup: str, own: bool) -> client.Job:
    """The job registered with the agent (pids = this launcher; the command is our child)."""
    job = client.Job(
        args.cojob,
        args.job,
        stages,
        arch=args.arch,
        model_bytes=args.model_bytes or 0.0,
        flows=[parse_flow(t, i) for i, t in enumerate(args.to or [])],
        socket=args.socket,
        weight=args.weight,
        cgroup=cgroup,
        own_cgroup=own,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = _show
        job.start()
    return job


def _show(message: Any, category: Any, *_: Any, **__: Any) -> None:
    print(f"grouper run: warning: {message}", file=sys.stderr)
