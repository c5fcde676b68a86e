"""The fast path's state as two named tuples of arrays: the flow classes (``Classes``)
and the per-virtual-link arrays with the filling's workspace (``Net``). Built per plan
by ``fast_state.rebuild``; read and written by the compiled kernels of ``fast_fill``,
``progressive`` and ``fast_state``. A kernel called per link or per class takes the
arrays it uses, not these tuples: numba reference-counts every array of a tuple passed
to a call (``fast_fill``). ``virtual_capacity`` is the arithmetic of ``Net.vcap``,
shared by the filling (``fast_fill``) and its exact end (``fast_exact``), and
``queue_layout`` what both read of the queues' places.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from grouper.simulator.kernel import kernel


class Classes(NamedTuple):
    """The classes of the flows still moving (rebuilt per plan, ``fast_state``)."""

    up: np.ndarray  # (C,) uplink virtual link
    down: np.ndarray  # (C,) downlink virtual link
    mult: np.ndarray  # (C,) flows still moving
    start: np.ndarray  # (C,) first of the class's flows in ``flow``
    flow: np.ndarray  # flows, class by class, those still moving first
    served: np.ndarray  # (C,) bytes every flow of the class was served since the plan
    #                      (an active class's: in ``a_served``)
    rate: np.ndarray  # (C,) rate of each of its flows: 0 outside the active set, and
    #                   every class's after a fallback (``count[3]``); an active class's
    #                   after a settled allocation: in ``a_rate``
    least: np.ndarray  # (C,) least ``key`` (bytes left + served) of its flows
    slack: np.ndarray  # (C,) largest "done" threshold (EPS x size) of its flows
    apos: np.ndarray  # (C,) position in ``aset`` or -1
    aset: np.ndarray  # the active set (both links open)
    a_up: np.ndarray  # the links of ``aset[i]`` beside it: scanned in order, not by class
    a_down: np.ndarray
    a_mult: np.ndarray  # its flows still moving (``mult``), beside it too
    pos: np.ndarray  # classes with a rate after a fallback (``fast_fill.class_rates``)
    count: np.ndarray  # [active classes, classes with a rate, parts to be ordered again,
    #                     the last allocation fell back]
    # beside ``aset[i]``, so that an event reads the active set's service in order, not
    # class by class (``fast_state._step_length``, ``_serve``):
    a_rate: np.ndarray  # its rate at its part's last filling (after a fallback, the
    #                     rounds' last: the next start; the flows move at ``rate``)
    a_served: np.ndarray  # its ``served``, kept here while it is active
    a_least: np.ndarray  # its ``least`` and ``slack``, copies
    a_slack: np.ndarray


class Net(NamedTuple):
    """Per virtual link: capacities, class lists and the filling's workspace."""

    cap: np.ndarray  # (V,) the port's capacity
    vstart: np.ndarray  # (V+1,) where each link's classes start in ``lcls``
    vnum: np.ndarray  # (V,) classes with flows
    used: np.ndarray  # (V,) rate x flows of its classes, and the rates of flows that
    #                   ended since the last filling (the next allocation's start)
    vcap: np.ndarray  # (V,) what the queues above leave
    again: np.ndarray
    isopen: np.ndarray  # (V,) bool: vcap > tol
    cnt: np.ndarray  # (V,) int64 workspace (unfrozen flows)
    res: np.ndarray  # (V,) residual at level ``lv``
    lv: np.ndarray
    astart: np.ndarray  # (V+1,) the fallback's members per link: from here in ``acls``
    acls: np.ndarray  # (to ``work[0]``), ``progressive.links_of``
    aother: np.ndarray  # (2C,) beside each entry: the member's other link
    amult: np.ndarray  # (2C,) and its flows
    heap_k: np.ndarray
    heap_v: np.ndarray
    work: np.ndarray  # (3, V) int64: end of the fallback's lists, batch, aside / flips
    m_up: np.ndarray  # (C,) the fallback's members: links, flows, class
    m_down: np.ndarray
    m_mult: np.ndarray
    m_cls: np.ndarray
    m_rate: np.ndarray  # (C,) their rates (the fallback's workspace, as the four above)
    m_used: np.ndarray  # (V,) rate x flows per link
    dirty: np.ndarray  # (V,) bool: a class joined, left or lost flows, or its use moved
    #                    (``anderson``), since the last filling
    part: np.ndarray  # (V,) union-find parents: links joined by active classes
    deg: np.ndarray  # (V,) active classes per link
    books: np.ndarray  # [classes that left since the parts were found, of them since
    #                     the parts were ordered from parts in cycles, classes in
    #                     ``gone``, parts, groups, groups that are cycles]
    gone: np.ndarray  # (C,) the classes left with no flows, still in the active set
    filled: np.ndarray  # (V,) each link's capacity at its part's last filling
    tol: np.ndarray  # [tol]
    worst: np.ndarray  # (C,) the classes by worst queue (the fallback's order, per plan)
    worst_start: np.ndarray  # (q+1,) where each queue's classes start in ``worst``; -1
    #                          until the plan's first fallback sorts them
    worst_ports: np.ndarray  # (2, C) the up and down ports of ``worst[j]``, beside it
    port: np.ndarray  # (V,) the port of each virtual link
    b_lstart: np.ndarray  # (V+2,) where each part's links start in ``b_links``
    b_links: np.ndarray  # (V,) the links of the parts, part by part
    cnt0: np.ndarray  # (V,) flows of the active classes per link
    l_part: np.ndarray  # (V,) each link's part, in order, at the last ordering, or -1
    lcls: np.ndarray  # (2C,) every class per link (CSR by ``vstart``), the active ones first
    lother: np.ndarray  # (2C,) beside each: the class's other link
    lmult: np.ndarray  # (2C,) and its flows (kept for the active ones)
    aend: np.ndarray  # (V,) where each link's active classes end in ``lcls``
    kpos: np.ndarray  # (2, C) each class's place in ``lcls`` on its uplink, downlink
    kbuf: np.ndarray  # (C,) a flipped link's classes that join or leave
    l_cyc: np.ndarray  # (V,) bool: the link's part is in a cycle (at the last ordering)
    lapos: np.ndarray  # (2C,) beside each active entry of ``lcls``: its place in ``aset``
    restart: np.ndarray  # (V,) after a fallback, the use of the rounds' last filling:
    #                      the next allocation starts from it, not the fallback's
    b_gend: np.ndarray  # (V+1,) at the place of a cycle's first part, where its last
    #                     part ends (its parts are solved together by offers); else -1
    max_cycle: np.ndarray  # [queues]: the largest cycle solved by offers (``MAX_CYCLE``;
    #                        0 fills every cycle part by part)
    max_rounds: np.ndarray  # [rounds]: the rounds before the fallback (``MAX_ROUNDS``)


@kernel
def virtual_capacity(used: np.ndarray, cap: np.ndarray, q: int, out: np.ndarray) -> None:
    """What every queue gets (``Net.vcap``): its port's capacity less what the queues
    above it use (``used``), into ``out``."""
    for p in range(len(used) // q):
        above = 0.0
        for b in range(q):
            v = p * q + b
            out[v] = max(cap[v] - above, 0.0)
            above += used[v]


@kernel
def queue_layout(nv: int, q: int) -> tuple[np.ndarray, np.ndarray]:
    """Every virtual link's first queue on its port and its port's depth (an uplink 1,
    a downlink 2: the ports below half are uplinks), as ``newton_end`` and
    ``offer_sweep`` read them: for the exact end (``fast_exact``) and the cycles swept
    by offers (``fast_fill``)."""
    lfirst, vdep = np.empty(nv, np.int64), np.empty(nv)
    for v in range(nv):
        lfirst[v] = v - v % q
        vdep[v] = 1.0 if v // q < nv // q // 2 else 2.0
    return lfirst, vdep
