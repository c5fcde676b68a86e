"""Trials of a search as multi-rank DDP jobs, each rank started with ``grouper run``.

A :class:`DdpRunner` is the ``Runner`` of :class:`grouper.integrations.optuna.SyncHalving`:
``start`` launches every rank of a trial on its host, ``run_stage`` lets every trial of
the search train one stage at once and collects the losses, ``prune`` stops a trial at
its rung, ``finish`` waits for a trial that ran every stage. No port is registered with
anyone: the agents find the ranks' connections from their processes.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from grouper.common.interpreter import python_argv

Spawn = Callable[..., subprocess.Popen]  # (host, argv, **popen kwargs) -> process


@dataclass(frozen=True)
class Rank:
    host: str
    address: str
    nic: str


@dataclass
class TrialRun:
    ranks: list[subprocess.Popen]
    stage_done: list[float] = field(default_factory=list)  # unix time each stage ended
    stage_go: list[float] = field(default_factory=list)  # unix time each stage was started
    losses: list[float] = field(default_factory=list)


class DdpRunner:
    def __init__(
        self,
        cojob: str,
        spawn: Spawn,
        placement: Callable[[int], list[Rank]],
        socket_of: Callable[[str], str],
        *,
        width: int,
        port: int,
        lr: Callable[[Any], float] = lambda t: t.suggest_float("lr", 1e-3, 1e-1, log=True),
    ) -> None:
        self.cojob, self.spawn, self.placement, self.socket_of = cojob, spawn, placement, socket_of
        self.width, self.port, self.lr = width, port, lr
        self.trials: dict[int, TrialRun] = {}
        self.started = 0.0

    def start(self, trial: Any, stages: list[int]) -> None:
        ranks = self.placement(trial.number)
        lr = self.lr(trial)
        procs = []
        for r, rank in enumerate(ranks):
            argv = [
                *python_argv("-m", "grouper.cli", "run"), "--cojob", self.cojob,
                "--job", f"trial-{trial.number}", "--stages", ",".join(map(str, stages)),
                "--socket", self.socket_of(rank.host), "--",
                *python_argv("-m", "grouper.experiments.ddp_trial"), "--master", ranks[0].address,
                "--port", str(self.port + trial.number), "--rank", str(r),
                "--world", str(len(ranks)), "--width", str(self.width),
                "--stages", ",".join(map(str, stages)), "--seed", str(trial.number),
                "--lr", repr(lr),
            ]  # fmt: skip
            procs.append(
                self.spawn(
                    rank.host,
                    argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env_extra={"GLOO_SOCKET_IFNAME": rank.nic, "GROUPER_ADDRESS": rank.address},
                )  # fmt: skip
            )
        self.trials[trial.number] = TrialRun(procs)
        self.started = self.started or time.time()

    def ready(self) -> None:
        """Wait until every rank of every started trial has its process group up."""
        for run in self.trials.values():
            for p in run.ranks:
                msg = json.loads(_line(p))
                if "ready" not in msg:
                    raise RuntimeError(f"a rank said {msg} before it was ready")

    def _say(self, number: int, word: str) -> None:
        for p in self.trials[number].ranks:
            if p.poll() is None and p.stdin:
                p.stdin.write(word + "\n")
                p.stdin.flush()

    def run_stage(self, trials: list[Any], k: int) -> dict[int, float]:
        for t in trials:
            self.trials[t.number].stage_go.append(time.time())
            self._say(t.number, "go")
        out = {}
        for t in trials:
            run = self.trials[t.number]
            lines = [json.loads(_line(p)) for p in run.ranks]
            run.stage_done.append(max(x["t"] for x in lines))
            run.losses.append(lines[0]["loss"])
            out[t.number] = lines[0]["loss"]
        return out

    def prune(self, trial: Any) -> None:
        self._say(trial.number, "stop")
        self._wait(trial.number)

    def finish(self, trial: Any) -> None:
        self._wait(trial.number)

    def _wait(self, number: int, timeout: float = 60.0) -> None:
        for p in self.trials[number].ranks:
            if p.stdin:
                p.stdin.close()
            if p.wait(timeout) != 0:
                raise RuntimeError(f"trial {number}: a rank exited with status {p.returncode}")

    def close(self) -> None:
        """End whatever still runs (an error path): by pid, never by name."""
        for run in self.trials.values():
            for p in run.ranks:
                if p.poll() is None:
                    p.kill()
                    p.wait()


def _line(p: subprocess.Popen) -> str:
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        p.wait(30)
        raise RuntimeError(f"a rank exited (status {p.returncode}) before ending its stage")
    return line
