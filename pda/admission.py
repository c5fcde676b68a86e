"""AdaDUAL admission (Wang et al. 2020, Section IV-B, Algorithm 2).

Contention model (their Eq. 5): ``k`` concurrent communication tasks of ``M`` bytes
each take ``a + k*b*M + (k-1)*eta*M``. A new task joins the tasks already on its ports
only if sharing beats waiting: with no task it starts, with one it starts when
``M_new / M_old_remaining < b / (2 (b + eta))`` (Theorem 2), with two or more it waits.
"""

from __future__ import annotations

from collections.abc import Sequence

from grouper.common.contention import ContentionModel


def adadual_admit(
    new_bytes: float, existing_remaining: Sequence[float], model: ContentionModel
) -> bool:
    """Algorithm 2: may a new task of ``new_bytes`` start next to ``existing_remaining``?

    ``existing_remaining`` holds the remaining bytes of the tasks already running on the
    busiest of the new task's ports.
    """
    busy = [m for m in existing_remaining if m > 0]
    if not busy:
        return True
    if len(busy) == 1:
        return new_bytes / busy[0] < model.share_threshold
    return False


def two_task_average(
    first_bytes: float, second_bytes: float, second_start: float, model: ContentionModel
) -> tuple[float, float]:
    """Completion times (T_first, T_second) when ``first`` starts at 0 and ``second``
    at ``second_start``, under the contention model with ``a`` neglected (Problem P1).

    A task alone moves 1/b bytes per second; two tasks together each move
    1/(2b + eta). Evaluated by stepping through the events, not by the closed forms, so
    tests can check Theorems 1 and 2 against it.
    """
    b, eta = model.b, model.eta
    left = [first_bytes, second_bytes]
    t = 0.0
    done = [0.0, 0.0]
    # phase 1: first alone until second starts (or first ends)
    alone = min(second_start, left[0] * b)
    left[0] -= alone / b
    t = alone
    if left[0] <= 0:
        done[0] = t
        t = max(t, second_start)
        done[1] = t + left[1] * b
        return done[0], done[1]
    # phase 2: both share until the smaller remainder ends
    per = 2 * b + eta
    shared = min(left) * per
    t += shared
    left = [x - shared / per for x in left]
    first_out = 0 if left[0] <= left[1] else 1
    done[first_out] = t
    other = 1 - first_out
    done[other] = t + max(left[other], 0.0) * b
    return done[0], done[1]
