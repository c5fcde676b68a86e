"""Flow rates on a network of links with priority queues (fluid model).

Every flow crosses a path of directed links and sits in one queue on each link (its
band on the sender's NIC, the DSCP-selected queue on switch ports). Queues are strict
priority (0 highest); flows in the same queue share max-min fairly.

Progressive filling, highest queue first: a flow joins the filling at level
``max(queue over its path)`` (the lowest priority it has anywhere, which is what caps
it); at each level the joining flows grow at the same pace, and every link that runs
out of residual capacity freezes the flows crossing it. With one queue this is exact
max-min fairness; across levels it gives strict priority, and lower levels still get
whatever is left (work conservation).

Optional contention penalty (Wang et al., Eq. 5: k concurrent tasks take
``a + k b M + (k-1) eta M``): when flows of ``k`` distinct tasks (jobs) share one queue
of a link, that queue moves data at efficiency ``k b / (k b + (k-1) eta)``. With
``penalty = eta / b`` = 0 the model is the ideal fluid one.
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

EPS = 1e-12


def efficiency(k: np.ndarray, penalty: float) -> np.ndarray:
    """Eq. 5's efficiency of ``k`` concurrent tasks: k b / (k b + (k-1) eta)."""
    k = np.maximum(np.asarray(k, dtype=float), 1.0)
    return k / (k + (k - 1.0) * penalty)


def allocate(
    incidence: sparse.csr_matrix | tuple[np.ndarray, np.ndarray],
    capacity: np.ndarray,
    level: np.ndarray,
    task: np.ndarray | None = None,
    penalty: float = 0.0,
) -> np.ndarray:
    """Rates of flows given which links they cross, link ``capacity`` and each flow's
    filling ``level``; ``task`` (job of every flow) and ``penalty`` (eta / b) turn on
    the contention model.

    ``incidence`` is a flow x link matrix (1 where the flow crosses the link) or, faster,
    a pair of arrays (flow index, link index) with one entry per crossing.
    """
    level = np.asarray(level)
    n = len(level)
    rates = np.zeros(n)
    if n == 0:
        return rates
    if isinstance(incidence, tuple):
        pf, pl = (np.asarray(a, dtype=np.int64) for a in incidence)
    else:
        coo = sparse.coo_matrix(incidence)
        pf, pl = coo.row.astype(np.int64), coo.col.astype(np.int64)
    nl = len(capacity)
    residual = np.asarray(capacity, dtype=float).copy()
    tol = EPS * max(float(residual.max(initial=0.0)), 1.0)
    for lv in np.unique(level):
        active = level == lv
        cost = np.ones(nl)  # capacity used per unit of rate, per link
        if penalty > 0 and task is not None:
            sel = active[pf]
            tasks = np.asarray(task, dtype=np.int64)
            span = int(tasks.max()) + 1
            keys = np.unique(pl[sel] * span + tasks[pf[sel]])
            k = np.bincount(keys // span, minlength=nl)
            cost = 1.0 / efficiency(k, penalty)
        while active.any():
            on = active[pf]
            counts = np.bincount(pl[on], minlength=nl).astype(float)
            used = counts > 0
            if not used.any():
                break
            share = np.full(nl, np.inf)
            share[used] = residual[used] / (counts[used] * cost[used])
            delta = max(float(share.min()), 0.0)
            rates[active] += delta
            residual -= delta * counts * cost
            saturated = used & (residual <= tol)
            residual[saturated] = 0.0
            if not saturated.any():
                break
            hit = np.zeros(n, dtype=bool)
            hit[pf[saturated[pl]]] = True
            active &= ~hit
    return rates
