"""The Optuna mapping: rungs -> stage iterations, a trial -> a job, pruned -> killed."""

from __future__ import annotations

import pytest

optuna = pytest.importorskip("optuna", reason="the optuna extra is not installed")

import grouper.client as client  # noqa: E402
from grouper.integrations import optuna as go  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.WARNING)


def test_rungs_become_stage_lengths():
    assert go.rung_stages(100, 2, 800) == [100, 100, 200, 400]
    assert go.rung_stages(1, 3, 27) == [1, 2, 6, 18]
    assert go.rung_stages(100, 2, 800, min_early_stopping_rate=1) == [200, 200, 400]
    assert go.rung_stages(100, 2, 50) == [50], "max below the first rung: one stage"
    assert sum(go.rung_stages(7, 3, 1000)) == 1000
    with pytest.raises(ValueError):
        go.rung_stages(0, 2, 10)


def test_stages_come_from_optunas_own_pruner():
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=5, reduction_factor=3)
    assert go.pruner_stages(pruner, 100) == [5, 10, 30, 55]
    with pytest.raises(ValueError, match="auto"):
        go.pruner_stages(optuna.pruners.SuccessiveHalvingPruner(), 100)
    with pytest.raises(TypeError):
        go.pruner_stages(optuna.pruners.MedianPruner(), 100)


def test_a_trial_is_a_job_of_the_study_cojob(monkeypatch):
    monkeypatch.setattr(client, "_warned_absent", True)
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=2)
    study = optuna.create_study(study_name="search-a", pruner=pruner)
    trial = study.ask()
    job = go.trial_job(trial, 8, socket="/nonexistent")
    assert (job.cojob, job.job, job.stages) == ("search-a", f"trial-{trial.number}", [2, 2, 4])


class Recorder:
    """A runner whose trials' values are their x: the larger x, the worse."""

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def start(self, trial, stages):
        trial.suggest_float("x", 0, 1)
        self.events.append(("start", trial.number, tuple(stages)))

    def run_stage(self, trials, k):
        self.events.append(("stage", k, tuple(sorted(t.number for t in trials))))
        return {t.number: t.params["x"] for t in trials}

    def prune(self, trial):
        self.events.append(("prune", trial.number))

    def finish(self, trial):
        self.events.append(("finish", trial.number))


def test_sync_halving_prunes_the_worse_half_at_each_rung():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    driver = go.SyncHalving(study, 4, [2, 2, 4])
    rec = Recorder()
    best = driver.run(rec)
    xs = {t.number: t.params["x"] for t in study.trials}
    order = sorted(xs, key=xs.get)
    assert [t.number for t in best] == order[:1]
    assert driver.pruned == {order[2]: 1, order[3]: 1, order[1]: 2}
    states = {t.number: t.state for t in study.trials}
    assert states[order[0]] == optuna.trial.TrialState.COMPLETE
    assert {states[n] for n in order[1:]} == {optuna.trial.TrialState.PRUNED}
    assert ("stage", 1, tuple(sorted(order[:2]))) in rec.events


def test_with_optunas_own_pruner_a_pruned_trial_ends_at_a_stage_boundary(monkeypatch):
    monkeypatch.setattr(client, "_warned_absent", True)  # no agent: jobs count, report nothing
    pruner = optuna.pruners.SuccessiveHalvingPruner(min_resource=2, reduction_factor=2)
    study = optuna.create_study(
        study_name="own-pruner", pruner=pruner, sampler=optuna.samplers.RandomSampler(seed=5)
    )
    ended: dict[int, int] = {}

    def objective(trial):
        x = trial.suggest_float("x", 0, 1)
        with go.trial_job(trial, 16, socket="/nonexistent") as job:
            try:
                for step in range(1, 17):
                    job.step()
                    trial.report(x * step, step)
                    if trial.should_prune():
                        raise optuna.TrialPruned()
            finally:
                ended[trial.number] = job.iterations_done
        return x

    study.optimize(objective, n_trials=8)
    boundaries = {2, 4, 8, 16}  # cumulative ends of stages [2, 2, 4, 8]
    assert go.pruner_stages(pruner, 16) == [2, 2, 4, 8]
    pruned = [t.number for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned, "the pruner pruned some trials"
    assert all(ended[n] in boundaries - {16} for n in pruned), ended
