"""Ray Tune: an experiment is a cojob, ASHA's rungs are its stages, a trial is a job,
a trial ASHA stops at a rung is a job killed at its stage boundary.

One piece, in the training function; the driver needs nothing::

    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from grouper.integrations.ray import trial_job

    asha = ASHAScheduler(metric="loss", mode="min", max_t=800, grace_period=100,
                         reduction_factor=2)             # stages 100, 100, 200, 400

    def train_fn(config):
        with trial_job(asha) as job:  # this trial's process (and its children) is the job
            for _ in range(800):
                loss = train_one_iteration(config)
                job.report({"loss": loss})  # tune.report, and the job's progress

    tune.Tuner(train_fn, tune_config=tune.TuneConfig(scheduler=asha, num_samples=16)).fit()

The trial's process holds its job and talks to the agent of the host it runs on, over
that agent's local socket, whichever node of the Ray cluster Ray placed it on.
:func:`trial_job` registers the job (cojob = the experiment's name, job = the trial
id), in a cgroup the agent makes for it (as ``grouper run`` does), or by its pid where
the host cannot. :meth:`TrialJob.report` counts the trial's progress in ASHA's
``time_attr`` (each report is one ``training_iteration``, the default; another
attribute is read from the metrics), sends it to the agent before passing the metrics
to ``tune.report`` when they end a stage (the agent has a rung's progress before ASHA
judges it), and reports it in the background otherwise.

The job ends when the trial does:

- ASHA stops the trial at a rung: Tune interrupts the function inside ``tune.report``
  (``SystemExit``) when it gives the trial's process to the next trial or stops the
  process; the job ends there, killed after the stages it finished;
- the trial runs to ``max_t``: the ``with`` block ends, the job completed;
- the trial fails: the exception leaves the ``with`` block, the job ends at the stages
  it finished;
- the process exits first (killed, or the ``with`` was left out): the job ends at
  interpreter exit, or the agent ends it when the job's processes are gone.

Tune reuses a worker process for the next trial (``reuse_actors``, its default for
functions): each trial's job ends before the next trial's begins, and a trial job
still open in the process when :func:`trial_job` runs again is ended first.

Imports nothing of ours but :mod:`grouper.client`.
"""

from __future__ import annotations

import itertools
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


class TrialJob(Job):
    """A trial's job, from :func:`trial_job`: call :meth:`report` where the training
    function would call ``tune.report``; leaving the ``with`` block ends the job."""

    def __init__(self, *args: Any, time_attr: str = "training_iteration", **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.time_attr = time_attr
        self.reports = 0  # calls of report(): Tune's training_iteration in this trial
        self._bounds = list(itertools.accumulate(self.stages))
        self._ended = False

    def report(self, metrics: dict, **kw: Any) -> None:
        """The job's progress, then ``tune.report(metrics, **kw)``. When Tune stops the
        trial inside ``tune.report`` (``SystemExit``), the job ends before it goes on."""
        self.reports += 1
        done = metrics.get(self.time_attr)
        if done is None and self.time_attr == "training_iteration":
            done = self.reports
        if isinstance(done, int | float) and math.isfinite(done):
            before = self.iterations_done
            self.step(max(0, int(done) - before))  # clamped to the stages
            if any(before < b <= self.iterations_done for b in self._bounds):
                self.flush()  # a stage ends here: the agent has it before ASHA judges it
        try:
            tune.report(metrics, **kw)
        except BaseException as exc:
            self._end("stopped by Tune" if isinstance(exc, SystemExit) else _what(exc))
            raise

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        self._end("returned" if kind is None else _what(exc))

    def close(self) -> None:
        """Flush the progress and end the job (idempotent)."""
        self._end("closed")

    def _end(self, how: str) -> None:
        global _held
        if not self._ended:
            self._ended = True
            if self.active:
                log.info(
                    "trial %s: job %s/%s ended after %d of %d iterations (%s)",
                    self.job, self.cojob, self.job, self.iterations_done, self.total, how,
                )  # fmt: skip
        super().close()  # the last progress, then the job's end for this process
        if _held is self:
            _held = None


_held: TrialJob | None = None  # this process's trial job while it is open


def _what(exc: BaseException | None) -> str:
    if isinstance(exc, SystemExit):
        return "stopped by Tune"
    return f"failed: {type(exc).__name__}" if exc is not None else "ended"


def trial_job(
    scheduler_or_stages: AsyncHyperBandScheduler | Sequence[int],
    *,
    time_attr: str | None = None,
    socket: str | None = None,
    cgroup: bool = True,
    **job_kw: Any,
) -> TrialJob:
    """Make the calling trial's process the trial's job, registered with this host's
    agent (call it first thing in the training function, as ``with trial_job(asha) as
    job:``). Ids from Ray's context: cojob = the experiment, job = the trial id.
    ``time_attr``: what counts iterations (default: the scheduler's, else
    ``training_iteration``). ``cgroup``: ask the agent for a cgroup of the job's own
    and move this process into it (children follow), else (or where the host cannot)
    the job is known by this process's pid. A job of an earlier trial still open in
    this process ends first. ``job_kw``: passed to :class:`grouper.client.Job`."""
    global _held
    if _held is not None:
        _held.close()  # Tune reused this process without ending the earlier trial's job
    ctx = tune.get_context()
    ids = (cojob_id(ctx.get_experiment_name()), ctx.get_trial_id())
    stages = _stages_of(scheduler_or_stages)
    if time_attr is None:
        time_attr = getattr(scheduler_or_stages, "_time_attr", "training_iteration")

    def register(own: bool) -> TrialJob:
        job = TrialJob(*ids, stages, time_attr=time_attr, socket=socket, own_cgroup=own, **job_kw)
        job.start()
        return job

    job = register(cgroup)
    if cgroup and job.error.startswith("own_cgroup:"):  # this host knows jobs by pids
        job.close()
        job = register(False)
    _held = job
    return job
