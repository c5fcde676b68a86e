"""How finely agents report a job's progress (shared by the agent and the bench's fleet).

A training job counts iterations continuously, so with exact reporting every running
job changes between two updates and every agent reports every job every progress
interval. The coordinator reads progress once a cycle, to order stages by the bytes
they have left; a step of a few percent of a stage moves that order little (and
``scheduling.keep_order_within`` keeps it anyway). With ``scheduling.progress_step``
an agent reports a job only when its iterations done cross a step of the stage they
are in (``step`` x that stage's iterations, at least one), when a stage or the job
ends, and when anything else about the job changes; docs/explanation/coordinator.md ("Progress
in steps") has the cost per period with and without.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_PROGRESS_STEP = 0.5  # a share of a stage: past half, a stage reports no progress at all


def reported_done(done: int, stage_iterations: Sequence[int], step: float) -> int:
    """``done`` as reported with ``step``: rounded down to the last step crossed in its
    stage (a stage's first iteration and the job's end are exact). ``step`` 0 (or a
    stage of one iteration) reports every change."""
    if step <= 0 or done <= 0:
        return done
    start = 0
    for size in stage_iterations:
        end = start + size
        if done < end:
            grain = max(1, int(size * step))
            return start + (done - start) // grain * grain
        start = end
    return done  # at or past the end of the last stage
