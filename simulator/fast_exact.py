"""The fast path's exact end of the rounds (numba): ``newton_end`` on the classes.

A class stands for its flows (``mult``): its two crossings, the uplink's queue (depth
1) and the downlink's (depth 2), weigh that many. The rates go where a settled
filling leaves them, beside the active set (``a_rate``), with every queue's use
(``used``) and the capacity it is now filled in (``filled``), so the next allocation
starts from the fixed point and keeps the parts whose links did not change.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.fast_classes import Classes, Net
from grouper.simulator.kernel import kernel
from grouper.simulator.newton_end import newton_end


@kernel
def exact_end(c: Classes, net: Net, q: int) -> bool:
    """The fixed point on the piece the rounds' last filling lies on, as the
    allocator's (``newton_end``); False (nothing changed) where it is not one, or where
    it gives a rate to a class outside the active set (a queue the rounds hold closed
    would open: the rounds go on)."""
    up, down, mult, aset, a_rate, apos = c.up, c.down, c.mult, c.aset, c.a_rate, c.apos
    cap, used, filled = net.cap, net.used, net.filled
    nc, nv = len(up), len(cap)
    cf = np.empty(2 * nc, np.int64)
    cv = np.empty(2 * nc, np.int64)
    wt = np.empty(nc)
    rates = np.zeros(nc)
    for k in range(nc):
        cf[2 * k], cf[2 * k + 1] = k, k
        cv[2 * k], cv[2 * k + 1] = up[k], down[k]
        wt[k] = mult[k]
    for i in range(c.count[0]):
        rates[aset[i]] = a_rate[i]
    lfirst = np.empty(nv, np.int64)
    vdep = np.empty(nv)
    for v in range(nv):
        lfirst[v] = v - v % q
        vdep[v] = 1.0 if v // q < nv // q // 2 else 2.0
    out = np.zeros(nc)
    if not newton_end(cf, cv, wt, rates, lfirst, cap, np.ones(nv), vdep, out):
        return False
    for k in range(nc):
        if out[k] > 0.0 and apos[k] < 0:
            return False
    for i in range(c.count[0]):
        a_rate[i] = out[aset[i]]
    used[:] = 0.0
    for k in range(nc):
        used[up[k]] += out[k] * mult[k]
        used[down[k]] += out[k] * mult[k]
    for p in range(nv // q):
        above = 0.0
        for b in range(q):
            filled[p * q + b] = max(cap[p * q + b] - above, 0.0)
            above += used[p * q + b]
    return True
