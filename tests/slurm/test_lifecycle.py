"""What Slurm does to jobs, and what grouper must make of it: a job cancelled in the
middle of a stage, a node's slurmd restarted under a running step, a step whose ranks
start seconds apart, and a job array (one search, one trial per array task).

Each test submits as an ordinary user (``alice``) and reads back with tools of its
own: the agents' Collect (who registered what, which jobs are still running), their
nftables maps (``nft -j``: the connections classified), the coordinator's Prometheus
endpoint (its count of jobs ended by kind) and the jobs' own output.
"""

from __future__ import annotations

from tests.slurm.conftest import Site
from tests.slurm.jobs import (
    Step,
    coordinator_metrics,
    home,
    jobs_ended,
    output,
    registered,
    ring_elements,
    running_jobs,
    step_script,
    submit,
    wait_for,
)


def ended(site: Site) -> dict[str, float]:
    text = coordinator_metrics(site)
    return {how: jobs_ended(text, how) for how in ("completed", "killed")}


def test_scancel_in_a_stage_ends_the_job_and_removes_its_kernel_state(site, users, shared):  # noqa: F811
    alice, step = users[0], Step("long", 5303, 1_000_000, iterations=(400, 800))
    killed = ended(site)["killed"]
    job = submit(site, alice, step_script(site, shared, alice, step))
    wait_for(lambda: all(ring_elements(site, step.port).values()), 60,
             "the ring's connections classified on both nodes", site)  # fmt: skip
    site.slurm.as_user(alice.argv, "scancel", str(job), cwd=home(site, alice))
    wait_for(lambda: not site.slurm.queue(), 30, "the cancelled job to leave the queue")
    wait_for(lambda: not any(ring_elements(site, step.port).values()), 10,
             "the cancelled ring's map elements removed")  # fmt: skip
    # the agent finds a job's processes gone at its next liveness check (MEASURE_EVERY)
    left = lambda: f"the agents to end the cancelled jobs: {running_jobs(site, 'long')}"  # noqa: E731
    wait_for(lambda: not running_jobs(site, "long"), 5, left)
    wait_for(lambda: ended(site)["killed"] >= killed + 1, 15,
             "the coordinator to count the job killed in its stage")  # fmt: skip
    assert "CANCELLED" in output(site, alice, "long", job)


def test_a_slurmd_restarted_under_a_running_step_leaves_the_job_running(site, users, shared):  # noqa: F811
    """``systemctl restart slurmd`` on a node whose step runs: slurmstepd and the ranks
    go on, so the job keeps its registration and classification and ends completed."""
    alice, step = users[0], Step("restart", 5304, 1_000_000, iterations=(30, 60))
    before = ended(site)
    job = submit(site, alice, step_script(site, shared, alice, step))
    wait_for(lambda: all(ring_elements(site, step.port).values()), 60,
             "the ring's connections classified on both nodes", site)  # fmt: skip
    site.slurm.restart_slurmd("n1")
    assert site.slurm.queue() == [str(job)], "the step survived its node's slurmd restart"
    assert all(ring_elements(site, step.port).values()), "its connections still classified"
    assert len(running_jobs(site, "restart")) == 2, "both ranks' jobs still held"
    wait_for(lambda: not site.slurm.queue(), 120, "the job to end", site)
    assert output(site, alice, "restart", job).count(f"done {sum(step.iterations)} ") == 2
    wait_for(lambda: ended(site)["completed"] >= before["completed"] + 1, 30,
             "the coordinator to count the job completed")  # fmt: skip
    assert ended(site)["killed"] == before["killed"], "no job counted killed"
    wait_for(lambda: not running_jobs(site, "restart"), 15, "the agents to end the job")


def test_ranks_that_start_seconds_apart_make_one_job(site, users, shared):  # noqa: F811
    """Rank 1 starts 4 s after rank 0 (a slow node, a container pull): rank 0's agent
    holds the job alone meanwhile, and the job is still one job that completes."""
    alice = users[0]
    step = Step("late", 5305, 1_000_000, before='[ "$SLURM_PROCID" = 1 ] && sleep 4; ')
    before = ended(site)
    job = submit(site, alice, step_script(site, shared, alice, step))
    wait_for(lambda: ("n1", "late", "trial-0") in registered(site), 30, "rank 0 registered", site)
    assert ("n2", "late", "trial-0") not in registered(site), "rank 1 started late"
    wait_for(lambda: ("n2", "late", "trial-0") in registered(site), 30, "rank 1 registered", site)
    wait_for(lambda: all(ring_elements(site, step.port).values()), 30,
             "the ring's connections classified on both nodes", site)  # fmt: skip
    wait_for(lambda: not site.slurm.queue(), 120, "the job to end", site)
    assert output(site, alice, "late", job).count(f"done {sum(step.iterations)} ") == 2
    wait_for(lambda: ended(site)["completed"] >= before["completed"] + 1, 30,
             "the coordinator to count the job completed")  # fmt: skip
    assert ended(site)["killed"] == before["killed"], "no job counted killed"


def test_a_job_array_is_one_search_with_a_trial_per_task(site, users, shared):  # noqa: F811
    """``sbatch --array=0-1``: each array task is one trial (``--job
    trial-$SLURM_ARRAY_TASK_ID``) of one search, on a port of its own."""
    alice = users[0]
    step = Step("array", "$((5310 + SLURM_ARRAY_TASK_ID))", 1_000_000,
                job="trial-$SLURM_ARRAY_TASK_ID", sbatch="--array=0-1 ", out="%A_%a")  # fmt: skip
    before = ended(site)
    array = submit(site, alice, step_script(site, shared, alice, step))
    keys = {(n, "array", f"trial-{t}") for n in site.addrs for t in (0, 1)}
    wait_for(lambda: keys <= set(registered(site)), 60, "both tasks' ranks registered", site)
    assert {registered(site)[k] for k in keys} == {alice.uid}, "every task is its user's"
    wait_for(lambda: not site.slurm.queue(), 120, "the array to end", site)
    for task in (0, 1):
        text = output(site, alice, "array", f"{array}_{task}")
        assert text.count(f"done {sum(step.iterations)} ") == 2, text
    wait_for(lambda: ended(site)["completed"] >= before["completed"] + 2, 30,
             "the coordinator to count both trials completed")  # fmt: skip
