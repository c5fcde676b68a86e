"""Flow rates on a network of links with strict-priority queues (fluid model).

Every flow crosses a path of directed links and sits in one queue on each link: its
band on the sender's NIC for the first hop, the DSCP-selected queue on every switch
port after it. Queues are strict priority (0 highest) per link; flows in the same
queue of a link share it max-min fairly.

Each (link, queue) pair is a virtual link whose capacity is what the link's higher
queues leave: ``capacity - usage of queues above``. Rates are the fixed point of

    r = maxmin(virtual capacities computed from r)

where ``maxmin`` is exact progressive filling (every flow grows at the same pace; a
virtual link that fills freezes the flows in it). It is computed in rounds, from r = 0
or from the previous event's rates. A round fills the queues in order
(:mod:`simulator.queue_order`): the flows whose queues are all open (capacity above
the tolerance) join their queues into components; a component with a queue below
another's on some link is filled after it, in the capacity its fresh rates leave; the
components of a priority cycle are solved together in their place in that order by
offers swept upstream first (:mod:`simulator.offer_sweep`: where the model has many
fixed points, the one where an upstream queue decides, as the fabric does), or, in a
cycle of more than ``MAX_CYCLE`` queues or where the offers do not settle, filled one
after another in a fixed order (a sweep: each in what the fresh rates before it and
the last round's rates of the rest leave), and what lies below them after. After
every round that did not settle, the use of the queues of a cycle's parts moves to
Anderson's extrapolation from the last rounds (:mod:`simulator.anderson`), which is
how the rounds over a cycle filled so converge. Rounds stop when every queue
with a flow that has not ended has the capacity it was filled in. A flow's rate in a
queue never depends on lower queues, so where "f is above g on some link" never loops
back, a round is exact for the queues open at its start.
It is strict priority per link and max-min within each queue, with work conservation:
a lower queue gets exactly what the higher ones leave. Bands mapped from one global
order never loop back on one port, but on a leaf-spine flows ranked for different
receivers meet on spine links and can close a cycle. An allocation that has not
settled after ``EXACT_EVERY`` rounds is solved on the piece of the fixed point its last
filling lies on (:mod:`simulator.newton_end`: one level per bottleneck from a linear
system, kept only if it is a fixed point), and again after every ``EXACT_EVERY`` more;
where neither the rounds nor that settle in ``MAX_ROUNDS``, it falls back to filling
every flow at its worst queue on the path (feasible and work-conserving: the model
before per-link queues). The engines
serve the fallback's rates but start the next allocation from the rounds' last filling
(``Allocation.restart``): the fallback's rates are far from the fixed point (54% of the
total, L1, in FB2010's busy stretch), and rounds started from them fell back again.

Optional contention penalty (Wang et al., Eq. 5: k concurrent tasks take
``a + k b M + (k-1) eta M``): when flows of ``k`` distinct tasks (jobs) share one queue
of a link, that queue moves data at efficiency ``k b / (k b + (k-1) eta)``. With
``penalty = eta / b`` = 0 the model is the ideal fluid one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy import sparse

EPS = 1e-12
EXACT_EVERY = 16  # rounds between tries of the exact end
MAX_ROUNDS = 4 * EXACT_EVERY  # then the worst-queue fallback


class Allocation(NamedTuple):
    rates: np.ndarray  # each flow's rate
    settled: bool  # False: ``MAX_ROUNDS`` ran out, the exact end found no fixed point
    #                and the worst-queue fallback decided
    restart: np.ndarray  # the rates of the rounds' last filling (``rates`` when they
    #                      settled): the engines' start for the next allocation


def allocate_settled(
    incidence: sparse.csr_matrix | tuple[np.ndarray, np.ndarray],
    capacity: np.ndarray,
    queue: np.ndarray,
    task: np.ndarray | None = None,
    penalty: float = 0.0,
    *,
    per_crossing: bool = False,
    start: np.ndarray | None = None,
    ended: np.ndarray | None = None,
    max_cycle: int | None = None,
    max_rounds: int | None = None,
) -> Allocation:
    """Rates of flows given which links they cross, link ``capacity`` and their queues,
    whether the rounds settled or their exact end found the fixed point (False:
    ``MAX_ROUNDS`` ran out, the exact end found none and the worst-queue fallback gave
    the rates; the engines count these, ``SimResult.fallbacks``), and the
    rates of the rounds' last filling, from which the engines start the next allocation
    (after a fallback they are closer to the fixed point than the fallback's rates).

    ``incidence`` is a flow x link matrix (1 where the flow crosses the link) or, faster,
    a pair of arrays (flow index, link index) with one entry per crossing, each flow's
    in path order: a link's depth (its earliest hop on a path, which orders the sweeps
    by offers and the exact end's rule on ties) is read from that order, and a matrix
    gives each flow's links in the order of their numbers. ``queue`` has
    one entry per flow (the same queue on every link of its path) or, with
    ``per_crossing``, one per crossing in the order of the pairs. ``task`` (job of every
    flow) and ``penalty`` (eta / b) turn on the contention model. ``start`` (rates of
    a close allocation, e.g. the previous event's) changes the rounds' path, not the
    fixed point they settle at. ``ended`` (a mask over the flows) marks flows that ended
    at the last event: their ``start`` rates still count in the use the rounds start
    from (their queue-mates take the capacity back before a lower queue is offered it;
    with the contention penalty that use is charged at the queue's cost without them),
    and they get rate 0 and take no other part: no task, no queue to settle.
    ``max_cycle``: the most queues a cycle solved by offers has (``offer_sweep``'s
    ``MAX_CYCLE`` unless given; 0 fills every cycle's components one after another).
    ``max_rounds``: the rounds before the fallback (``MAX_ROUNDS`` unless given).
    """
    pf, pl, pq, n = crossings(incidence, queue, per_crossing)
    if ended is not None and len(ended) != n:
        raise ValueError(f"ended: {len(ended)} entries for {n} flows")
    rates = np.zeros(n)
    if n == 0 or len(pf) == 0:
        return Allocation(rates, True, rates)
    capacity = np.asarray(capacity, dtype=float)
    tflow = (
        np.asarray(task, dtype=np.int64)[pf]
        if penalty > 0 and task is not None
        else np.zeros(len(pf), dtype=np.int64)
    )
    warm = start is not None
    from grouper.simulator.allocator_kernel import (
        allocate_kernel,  # numba: compiled when first used
    )
    from grouper.simulator.offer_sweep import MAX_CYCLE

    rates, settled, restart = allocate_kernel(
        pf,
        pl,
        pq,
        tflow,
        capacity,
        float(penalty),
        n,
        np.asarray(start, dtype=float) if warm else np.zeros(n),
        warm,
        np.zeros(n, np.bool_) if ended is None else np.asarray(ended, dtype=np.bool_),
        EPS * max(float(capacity.max(initial=0.0)), 1.0),
        MAX_ROUNDS if max_rounds is None else max_rounds,
        EXACT_EVERY,
        MAX_CYCLE if max_cycle is None else max_cycle,
    )
    return Allocation(rates, bool(settled), restart)


def crossings(
    incidence: sparse.csr_matrix | tuple[np.ndarray, np.ndarray],
    queue: np.ndarray,
    per_crossing: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``allocate_settled``'s inputs as one entry per link crossing: (flow, link, queue of the
    flow on that link) and the number of flows."""
    if isinstance(incidence, tuple):
        pf, pl = (np.asarray(a, dtype=np.int64) for a in incidence)
        n = len(queue) if not per_crossing else int(pf.max(initial=-1)) + 1
    elif per_crossing:
        raise ValueError("per_crossing queues need the (flow, link) pair form")
    else:
        coo = sparse.coo_matrix(incidence)
        order = np.lexsort((coo.col, coo.row))
        pf, pl = coo.row[order].astype(np.int64), coo.col[order].astype(np.int64)
        n = incidence.shape[0]
    queue = np.asarray(queue, dtype=np.int64)
    pq = queue if per_crossing else queue[pf]
    if len(pq) != len(pf):
        raise ValueError(f"queue: {len(pq)} entries for {len(pf)} link crossings")
    return pf, pl, pq, n


def warm_up() -> None:
    """Compile the kernel now (a few seconds the first time, then loaded from numba's
    disk cache) rather than in the first simulated event."""
    pairs = (np.array([0, 0, 1]), np.array([0, 1, 1]))
    q = np.array([0, 1, 0])
    allocate_settled(pairs, np.ones(2), q, np.array([0, 1]), 0.5, per_crossing=True)
    allocate_settled(pairs, np.ones(2), q, per_crossing=True, start=np.ones(2))
