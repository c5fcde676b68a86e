"""The fast path's exact end of the rounds (numba): ``newton_end`` on the classes.

It solves for the active set (the classes whose two queues are open; a class's two
crossings, the uplink's queue at depth 1 and the downlink's at depth 2, weigh its
flows); every other class stays at 0, so the answer is kept only if each of them still
has a closed queue. The rates go where a settled filling leaves them, beside the
active set (``a_rate``), with every queue's use (``used``) and the capacity it is now
filled in (``filled``), so the next allocation starts from the fixed point and keeps
the parts whose links did not change.
"""

from __future__ import annotations

import numpy as np

from grouper.simulator.fast_classes import Classes, Net, queue_layout, virtual_capacity
from grouper.simulator.kernel import kernel
from grouper.simulator.newton_end import newton_end


@kernel
def exact_end(c: Classes, net: Net, q: int, tol: float) -> bool:
    """The fixed point on the piece the rounds' last filling lies on, as the
    allocator's (``newton_end``); False (nothing changed) where it is not one, or where
    a class outside the active set would get a rate (a queue the rounds hold closed
    would open: the fallback decides)."""
    up, down, mult, aset, a_rate, apos = c.up, c.down, c.mult, c.aset, c.a_rate, c.apos
    cap = net.cap
    na, nv = c.count[0], len(cap)
    cf, cv, wt = np.empty(2 * na, np.int64), np.empty(2 * na, np.int64), np.empty(na)
    for i in range(na):
        cf[2 * i], cf[2 * i + 1] = i, i
        cv[2 * i], cv[2 * i + 1] = up[aset[i]], down[aset[i]]
        wt[i] = mult[aset[i]]
    lfirst, vdep = queue_layout(nv, q)
    out = np.zeros(na)
    if not newton_end(cf, cv, wt, a_rate[:na], lfirst, cap, np.ones(nv), vdep, out):
        return False
    used, vcap = np.zeros(nv), np.empty(nv)
    for i in range(na):
        used[cv[2 * i]] += out[i] * wt[i]
        used[cv[2 * i + 1]] += out[i] * wt[i]
    virtual_capacity(used, cap, q, vcap)
    for k in range(len(up)):
        if mult[k] > 0 and apos[k] < 0 and vcap[up[k]] > tol and vcap[down[k]] > tol:
            return False
    a_rate[:na] = out
    net.used[:] = used
    net.filled[:] = vcap
    return True
