"""One job-level run: the engine ``rules`` ask for (the authors' poll artefact runs in
:class:`simulator.jobs.reference_poll.PolledSimulation`, everything else in
:class:`simulator.jobs.engine.Simulation`)."""

from __future__ import annotations

from grouper.simulator.jobs.engine import JobsResult, Simulation
from grouper.simulator.jobs.placement import Placement
from grouper.simulator.jobs.reference_poll import PolledSimulation
from grouper.simulator.jobs.rules import Rules
from grouper.simulator.jobs.schedulers import CommScheduler
from grouper.workloads.jobmix import JobMix


def run_jobs(
    mix: JobMix,
    placement: Placement,
    scheduler: CommScheduler,
    seed: int = 1,
    rules: Rules | None = None,
) -> JobsResult:
    """One run under ``rules`` (default: the paper's), with the authors' poll when
    ``rules.reference_poll``."""
    rules = rules or Rules()
    engine = PolledSimulation if rules.reference_poll else Simulation
    return engine(mix, placement, scheduler, seed, rules).run()
