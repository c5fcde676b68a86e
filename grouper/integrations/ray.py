"""Ray Tune: an experiment is a cojob, ASHA's rungs are its stages, a trial is a job,
a trial ASHA stops at a rung is a job killed at its stage boundary.

Two pieces, both needed::

    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from grouper.integrations.ray import GrouperCallback, trial_job

    asha = ASHAScheduler(metric="loss", mode="min", max_t=800, grace_period=100,
                         reduction_factor=2)             # stages 100, 100, 200, 400

    def train_fn(config):
        trial_job(asha)          # this trial's process (and its children) is the job
        for _ in range(800):
            loss = train_one_iteration(config)
            tune.report({"loss": loss})

    tune.Tuner(train_fn, tune_config=tune.TuneConfig(scheduler=asha, num_samples=16),
               run_config=tune.RunConfig(callbacks=[GrouperCallback(asha)])).fit()

:func:`trial_job` runs in the trial's worker process: it registers the job with the
agent of that host, in a cgroup the agent makes for it (as ``grouper run`` does), or by
its pid where the host cannot. :class:`GrouperCallback` runs in the driver: it reports
each trial's progress from its results (ASHA's ``time_attr``, ``training_iteration`` by
default) and ends the job when the trial stops, whether ASHA stopped it at a rung,
it ran to ``max_t``, or it failed. The callback talks to the agent of the host the
driver runs on: trials on other nodes of a Ray cluster are registered with their own
host's agent, but their progress and end do not reach it (not built).

Imports nothing of ours but :mod:`grouper.client`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

from ray import tune
from ray.tune.schedulers import AsyncHyperBandScheduler

from grouper.client import Job

log = logging.getLogger("grouper.integrations.ray")


def rung_stages(grace_period: int, reduction_factor: float, max_t: int) -> list[int]:
    """Iterations of each stage: ASHA's rungs are at ``grace_period x
    reduction_factor^k`` (a trial is judged on the first result at or past one); the
    last stage runs to ``max_t``."""
    if grace_period < 1 or not reduction_factor > 1 or max_t < grace_period:
        raise ValueError("need grace_period >= 1, reduction_factor > 1, max_t >= grace_period")
    bounds = []
    k = 0
    while (b := math.ceil(grace_period * reduction_factor**k)) < max_t:
        bounds.append(b)
        k += 1
    return _lengths([*bounds, max_t])


def asha_stages(scheduler: AsyncHyperBandScheduler) -> list[int]:
    """The stages ``scheduler`` (Ray's ``ASHAScheduler``) runs, from its own rungs.
    One bracket only: with several, trials of one experiment run different stages."""
    if not isinstance(scheduler, AsyncHyperBandScheduler):
        raise TypeError(f"scheduler: expected ASHAScheduler, got {type(scheduler).__name__}")
    brackets = scheduler._brackets
    if len(brackets) != 1:
        raise ValueError(f"scheduler: one bracket per experiment, got brackets={len(brackets)}")
    max_t = int(scheduler._max_t)
    rungs = {math.ceil(m) for m, _ in brackets[0]._rungs}
    return _lengths([*sorted(r for r in rungs if r < max_t), max_t])


def _lengths(bounds: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip([0, *bounds], bounds, strict=False)]


def cojob_id(experiment: str) -> str:
    """The cojob of an experiment (its directory name; job ids exclude '/' and ':')."""
    return experiment.replace("/", "-").replace(":", "-") or "ray-tune"


def _stages_of(scheduler_or_stages: AsyncHyperBandScheduler | Sequence[int]) -> list[int]:
    if isinstance(scheduler_or_stages, AsyncHyperBandScheduler):
        return asha_stages(scheduler_or_stages)
    return [int(s) for s in scheduler_or_stages]


def trial_job(
    scheduler_or_stages: AsyncHyperBandScheduler | Sequence[int],
    *,
    socket: str | None = None,
    cgroup: bool = True,
    **job_kw: Any,
) -> Job:
    """Make the calling trial's process the trial's job (call it first thing in the
    training function). Ids from Ray's context: cojob = the experiment, job = the
    trial id, as :class:`GrouperCallback` names them. ``cgroup``: ask the agent for a
    cgroup of the job's own and move this process into it (children follow), else
    (or where the host cannot) the job is known by this process's pid. The callback
    reports progress and ends the job; the returned job is started, and closing it
    does not end the job."""
    ctx = tune.get_context()
    ids = (cojob_id(ctx.get_experiment_name()), ctx.get_trial_id())
    stages = _stages_of(scheduler_or_stages)

    def register(own: bool) -> Job:
        job = Job(*ids, stages, socket=socket, own_cgroup=own, **job_kw)
        job.start()
        return job

    job = register(cgroup)
    if cgroup and job.error.startswith("own_cgroup:"):  # this host knows jobs by pids
        job.close()
        job = register(False)
    job.managed = True  # its end is the callback's to report, not this process's exit
    return job


class GrouperCallback(tune.Callback):
    """Reports trials to the grouper agent of the driver's host: progress from each
    result, the job's end when the trial stops (see the module's docstring)."""

    def __init__(
        self,
        scheduler_or_stages: AsyncHyperBandScheduler | Sequence[int],
        *,
        time_attr: str | None = None,
        socket: str | None = None,
    ) -> None:
        self.stages = _stages_of(scheduler_or_stages)
        if time_attr is None:
            time_attr = getattr(scheduler_or_stages, "_time_attr", "training_iteration")
        self.time_attr = time_attr
        self.socket = socket
        self.jobs: dict[str, Job] = {}  # trial id -> its job, while it runs
        self.ended: dict[str, int] = {}  # trial id -> iterations when its job ended
        self._control: Job | None = None  # the channel JobFinished goes over

    def _job(self, trial: Any) -> Job:
        job = self.jobs.get(trial.trial_id)
        if job is None:  # managed: the trial registers; we report progress on its behalf
            cojob = cojob_id(trial.experiment_dir_name)
            job = Job(cojob, trial.trial_id, self.stages, socket=self.socket, managed=True)
            job.start()
            self.jobs[trial.trial_id] = job
        return job

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self.ended.pop(trial.trial_id, None)  # a restarted trial runs again
        self._job(trial)

    def on_trial_result(
        self, iteration: int, trials: list, trial: Any, result: dict, **info: Any
    ) -> None:
        done = result.get(self.time_attr)
        if isinstance(done, int | float) and math.isfinite(done):
            job = self._job(trial)
            job.step(max(0, int(done) - job.iterations_done))  # clamped to the stages

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._end(trial)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        for job in self.jobs.values():
            job.close()
        self.jobs.clear()
        if self._control is not None:
            self._control.close()
            self._control = None

    def _end(self, trial: Any) -> None:
        """The trial stopped (ASHA's rung, ``max_t``, a failure): its last progress,
        then the job's end for every participant (``JobFinished`` without pids)."""
        job = self.jobs.pop(trial.trial_id, None)
        if job is None:
            return
        connected = job.active
        job.close()  # flushes the last progress synchronously; managed: no end sent
        self.ended[trial.trial_id] = job.iterations_done
        if not connected:
            return  # no agent: nothing to end
        if self._control is None:
            self._control = Job("-", "-", [1], socket=self.socket, managed=True)
            self._control.start()
        ctl = self._control
        if ctl.active:  # grouper.client has no public call ending a job for all
            ctl._call("JobFinished", ctl._pb.JobFinishedReport(cojob_id=job.cojob, job_id=job.job))
        log.info(
            "trial %s: job %s/%s ended after %d of %d iterations",
            trial.trial_id, job.cojob, job.job, job.iterations_done, job.total,
        )  # fmt: skip
