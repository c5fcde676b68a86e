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
"""

from __future__ import annotations

import numpy as np
from scipy import sparse

EPS = 1e-12


def allocate(
    incidence: sparse.csr_matrix,
    capacity: np.ndarray,
    level: np.ndarray,
) -> np.ndarray:
    """Rates of flows (rows of ``incidence``: flow x link, 1 where the flow crosses the
    link), given link ``capacity`` and each flow's filling ``level``."""
    n = incidence.shape[0]
    rates = np.zeros(n)
    if n == 0:
        return rates
    inc = sparse.csr_matrix(incidence, dtype=float)
    inc_t = inc.T.tocsr()
    residual = np.asarray(capacity, dtype=float).copy()
    tol = EPS * max(float(residual.max(initial=0.0)), 1.0)
    level = np.asarray(level)
    for lv in np.unique(level):
        active = level == lv
        # flows whose path has no capacity left at all get nothing at this level
        while active.any():
            counts = inc_t @ active.astype(float)  # active flows per link
            used = counts > 0
            if not used.any():
                break
            share = np.full(len(residual), np.inf)
            share[used] = residual[used] / counts[used]
            delta = max(float(share.min()), 0.0)
            rates[active] += delta
            residual -= delta * counts
            saturated = used & (residual <= tol)
            residual[saturated] = 0.0
            if not saturated.any():
                break
            frozen = (inc @ saturated.astype(float)) > 0
            active &= ~frozen
    return rates
