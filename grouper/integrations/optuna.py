"""Optuna: a study is a cojob, its successive-halving rungs are the stages, a trial is
a job, a pruned trial is a job killed at its stage boundary.

With Optuna's own pruner, inside an objective::

    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=100, reduction_factor=2)
    study = optuna.create_study(study_name="resnet-search", pruner=pruner)

    def objective(trial):
        with trial_job(trial, max_resource=800) as job:   # stages 100, 100, 200, 400
            for step in range(1, 801):
                loss = train_one_iteration(trial)
                job.step()
                trial.report(loss, step)
                if trial.should_prune():
                    raise optuna.TrialPruned()  # the job ends here: killed at its rung
        return loss

For experiments, :class:`SyncHalving` runs the plain synchronous variant: all trials
start together, wait for each other at every rung, and the worse half is pruned there.
Trials run wherever its ``runner`` puts them (separate processes, hosts, DDP jobs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import optuna

from grouper.client import Job


def rung_stages(
    min_resource: int, reduction_factor: int, max_resource: int, min_early_stopping_rate: int = 0
) -> list[int]:
    """Iterations of each stage: rung k is reached at min_resource x factor^(rate + k)
    steps; the last stage runs to ``max_resource``."""
    if min_resource < 1 or reduction_factor < 2 or max_resource < 1 or min_early_stopping_rate < 0:
        raise ValueError(
            "need min_resource >= 1, reduction_factor >= 2, max_resource >= 1, rate >= 0"
        )
    bounds = []
    k = 0
    while (b := min_resource * reduction_factor ** (min_early_stopping_rate + k)) < max_resource:
        bounds.append(b)
        k += 1
    bounds.append(max_resource)
    return [b - a for a, b in zip([0, *bounds], bounds, strict=False)]


def pruner_stages(pruner: optuna.pruners.BasePruner, max_resource: int) -> list[int]:
    """Stages of a study pruned by Optuna's ``SuccessiveHalvingPruner`` (or a
    ``HyperbandPruner``'s first bracket is not modelled: one bracket per study)."""
    if not isinstance(pruner, optuna.pruners.SuccessiveHalvingPruner):
        raise TypeError(f"pruner: expected SuccessiveHalvingPruner, got {type(pruner).__name__}")
    r = pruner._min_resource
    if r is None:  # "auto": Optuna estimates it from finished trials; we need it up front
        raise ValueError("pruner: min_resource='auto' has no stages yet; give an integer")
    return rung_stages(
        int(r), int(pruner._reduction_factor), max_resource, int(pruner._min_early_stopping_rate)
    )


def job_id(trial: optuna.trial.BaseTrial) -> str:
    return f"trial-{trial.number}"


def trial_job(trial: optuna.Trial, max_resource: int, **job_kw: Any) -> Job:
    """The grouper job of ``trial``: cojob = study name, stages = the pruner's rungs.
    Use it as a context manager around the trial's training."""
    stages = pruner_stages(trial.study.pruner, max_resource)
    return Job(trial.study.study_name, job_id(trial), stages, **job_kw)


class Runner(Protocol):
    """Where :class:`SyncHalving` runs trials. ``run_stage`` trains every trial in
    ``trials`` through stage ``k`` (all at once) and returns each one's value."""

    def start(self, trial: optuna.Trial, stages: list[int]) -> None: ...
    def run_stage(self, trials: list[optuna.Trial], k: int) -> dict[int, float]: ...
    def prune(self, trial: optuna.Trial) -> None: ...
    def finish(self, trial: optuna.Trial) -> None: ...


class SyncHalving:
    """Synchronous successive halving over an Optuna study (ask-and-tell)."""

    def __init__(self, study: optuna.Study, n_trials: int, stages: Sequence[int]) -> None:
        if n_trials < 1 or not stages or min(stages) < 1:
            raise ValueError("need n_trials >= 1 and positive stage lengths")
        self.study, self.n_trials, self.stages = study, n_trials, list(stages)
        self.pruned: dict[int, int] = {}  # trial number -> stage (1-based) it was cut after

    def run(
        self, runner: Runner, on_started: Callable[[], None] | None = None
    ) -> list[optuna.Trial]:
        """Run the search; returns the trials that completed every stage. A runner with
        a ``ready()`` method is waited for after every trial started; ``on_started``
        runs then, before the first stage (an experiment aligns searches there)."""
        alive = [self.study.ask() for _ in range(self.n_trials)]
        for t in alive:
            runner.start(t, self.stages)
        if hasattr(runner, "ready"):
            runner.ready()
        if on_started is not None:
            on_started()
        step = 0
        for k, length in enumerate(self.stages):
            values = runner.run_stage(alive, k)
            step += length
            for t in alive:
                t.report(values[t.number], step)
            if k == len(self.stages) - 1:
                break
            keep = math.ceil(len(alive) / 2)
            ranked = sorted(alive, key=lambda t: self._key(values[t.number]))
            for t in ranked[keep:]:
                runner.prune(t)
                self.study.tell(t, state=optuna.trial.TrialState.PRUNED)
                self.pruned[t.number] = k + 1
            alive = ranked[:keep]
        for t in alive:
            runner.finish(t)
            self.study.tell(t, t.study.trials[t.number].intermediate_values[step])
        return alive

    def _key(self, value: float) -> float:
        if math.isnan(value):
            return math.inf  # a diverged trial is the worst
        minimize = self.study.direction == optuna.study.StudyDirection.MINIMIZE
        return value if minimize else -value
