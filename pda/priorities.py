"""Global order -> local priorities per host (grouper paper, Section IV-B, Fig. 7-8).

Each port ranks the units (stages, or jobs for job-level baselines) that load it in
global order. A flow's *band* on its sender's NIC is the rank of its unit among the
units that send from that host; the *DSCP* it carries is the code point of the rank of
its unit among the units that receive at the flow's destination host (the switch puts
it in that egress queue).

Bands are numbered 0 (highest priority) to ``queues - 1``. Reserved bands (default 0,
for control traffic) and the scavenger band (default: the last one) are not given to
ranks. Ranks fill the data bands in order; ranks past the last data band share it when
admission is off. With admission on, at most two units share the last data band: its
owner and the first overflow unit that AdaDUAL admits (its load on the port against the
owner's); the other overflow units wait in the scavenger band.

Units that arrived since the order was computed (between two PDA runs) sit at its end
and follow the same rule, once: ranked inside the data bands (a band is free) they take
that band, below every ordered unit, with nobody to share it; ranked past them they are
overflow units like any other (DESIGN.md step 3: admission decides only where sharing
is unavoidable).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from grouper.common.queues import QueueConfig


@dataclass
class PortBands:
    """Band of every (unit, port) pair that carries load, as a sparse matrix.

    ``band.data`` holds ``band + 1`` so that zero means "unit does not load the port".
    """

    band: sparse.csr_matrix

    def lookup(self, units: np.ndarray, ports: np.ndarray, default: int) -> np.ndarray:
        got = np.asarray(self.band[units, ports]).ravel().astype(np.int64) - 1
        got[got < 0] = default
        return got


def port_bands(
    loads: sparse.spmatrix,
    order: np.ndarray,
    cfg: QueueConfig,
    active: np.ndarray | None = None,
    unlimited: bool = False,
) -> PortBands:
    """Rank the units on every port in global order and turn ranks into bands.

    Only ``active`` units (those with traffic now, e.g. the stage each job is in) take
    a rank; a cojob's later stages get theirs when they start, so they do not use up
    the few queues a port has. ``unlimited`` gives
    every rank its own band (the infinite-queue ablation; bands may exceed ``queues``).
    Units not in ``order`` take no rank either (sincronia and sptf order only the jobs
    with a stage now); a unit in it twice is an error.
    """
    order = np.asarray(order, dtype=np.int64)
    if len(order) and np.bincount(order, minlength=loads.shape[0]).max() > 1:
        raise ValueError("order: a unit appears more than once")
    if active is not None:
        order = order[np.asarray(active, dtype=bool)[order]]
    ranked = _by_port(loads, order)
    ptr, vals = ranked.indptr, ranked.data
    start = np.repeat(ptr[:-1], np.diff(ptr))  # where each entry's port starts
    rank = np.arange(len(vals)) - start
    data = np.asarray(cfg.data_bands, dtype=np.int64)
    nd = len(data)
    if unlimited:
        return PortBands(_by_unit(ranked, data[0] + rank, order, loads.shape))
    bands = data[np.minimum(rank, nd - 1)]
    if cfg.admission is not None and cfg.scavenger_band is not None:
        # overflow units of a port: the first (in global order) that AdaDUAL admits next
        # to the last band's owner shares that band; the others wait in the scavenger band
        over = np.flatnonzero(rank >= nd)
        if len(over):
            owner_load = vals[start[over] + nd - 1]
            with np.errstate(divide="ignore", invalid="ignore"):
                ok = (owner_load <= 0) | (vals[over] / owner_load < cfg.admission.share_threshold)
            bands[over] = cfg.scavenger_band
            admitted = over[ok]
            _, first = np.unique(start[admitted], return_index=True)
            bands[admitted[first]] = data[nd - 1]
    return PortBands(_by_unit(ranked, bands, order, loads.shape))


def _by_port(loads: sparse.spmatrix, order: np.ndarray) -> sparse.csc_matrix:
    """The positive loads of the units in ``order``, row ``i`` the unit at position
    ``i``, by port: each port's units come in global order (a CSR -> CSC conversion
    keeps the row order within every column, so no sort is needed)."""
    by_pos = sparse.csr_matrix(loads)[order]
    by_pos.sum_duplicates()
    by_pos.data[~(by_pos.data > 0)] = 0
    by_pos.eliminate_zeros()
    return by_pos.tocsc()


def _by_unit(ranked: sparse.csc_matrix, bands: np.ndarray, order: np.ndarray,
             shape: tuple[int, int]) -> sparse.csr_matrix:  # fmt: skip
    """``bands + 1`` at ``ranked``'s entries, with rows back from positions to units."""
    by_pos = sparse.csc_matrix((bands + 1, ranked.indices, ranked.indptr), ranked.shape).tocsr()
    counts = np.zeros(shape[0], dtype=np.int64)
    counts[order] = np.diff(by_pos.indptr)
    at = np.full(shape[0], -1, dtype=np.int64)
    at[order] = np.arange(len(order))  # each unit's position (row of by_pos)
    by_unit = by_pos[at[at >= 0]]  # the rows in unit order
    return sparse.csr_matrix((by_unit.data, by_unit.indices, np.r_[0, np.cumsum(counts)]), shape)


@dataclass
class FlowPriorities:
    """Band (sender NIC) and DSCP (switch egress toward receiver) of every flow row."""

    band: np.ndarray
    dscp: np.ndarray
    unit: np.ndarray  # unit row of every flow, -1 when the flow's job has no unit
    recv_band: np.ndarray | None = None  # the band behind the DSCP


def map_priorities(
    loads: sparse.spmatrix,
    order: np.ndarray,
    flow_unit: np.ndarray,
    flow_src: np.ndarray,
    flow_dst: np.ndarray,
    num_hosts: int,
    cfg: QueueConfig,
    unlimited: bool = False,
) -> FlowPriorities:
    """Bands and DSCPs of flows whose unit is ``flow_unit`` (-1: not scheduled).

    Units that no flow belongs to are not active and take no rank. With ``unlimited``
    the DSCP array holds the receiver-side band itself (no table can encode it).
    """
    active = np.zeros(loads.shape[0], dtype=bool)
    active[flow_unit[flow_unit >= 0]] = True
    pb = port_bands(loads, order, cfg, active, unlimited)
    table = np.asarray(cfg.dscp_table, dtype=np.int64)
    n = len(flow_unit)
    band = np.full(n, cfg.default_band, dtype=np.int64)
    recv_band = np.full(n, cfg.default_band, dtype=np.int64)
    ok = (flow_unit >= 0) & (flow_src != flow_dst)
    if ok.any():
        u = flow_unit[ok]
        band[ok] = pb.lookup(u, flow_src[ok], cfg.default_band)
        recv_band[ok] = pb.lookup(u, num_hosts + flow_dst[ok], cfg.default_band)
    dscp = recv_band if unlimited else table[recv_band]
    return FlowPriorities(band, dscp, np.asarray(flow_unit), recv_band)
