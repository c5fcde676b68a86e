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

from dataclasses import dataclass, field

import numpy as np
from scipy import sparse

from common.errors import ConfigError
from pda.admission import ContentionModel


def default_dscp_table(
    queues: int, default_band: int | None = None, scavenger: int | None = None
) -> tuple[int, ...]:
    """Band ``b`` -> class selector ``CS(7 - b)``: band 0 (control) is CS7, higher class
    selectors for higher priority, as most switches do by default. Two exceptions keep
    other people's traffic safe: the lowest data band (``default_band``, where traffic
    the plan does not know goes) carries DSCP 0, so unmarked traffic (SSH, storage, the
    frameworks' own control plane) shares the lowest data queue at the switches and is
    never starved behind scheduled stages; the scavenger band carries CS1 (8), the
    conventional lower-effort class, which switches must queue below CS0.
    """
    if not 1 <= queues <= 8:
        raise ConfigError("queues", f"the default DSCP table covers 1 to 8 queues, got {queues}")
    table = [8 * (7 - b) for b in range(queues)]
    if default_band is not None:
        if 0 in table:  # keep code points distinct: whoever had 0 takes the default's
            table[table.index(0)] = table[default_band]
        table[default_band] = 0
    if scavenger is not None and scavenger != default_band:
        if 8 in table:
            table[table.index(8)] = table[scavenger]
        table[scavenger] = 8
    return tuple(table)


def tos_byte(dscp: int) -> int:
    """The IPv4 TOS / IPv6 traffic-class byte that carries ``dscp`` (ECN bits zero)."""
    if not 0 <= dscp <= 63:
        raise ConfigError("dscp", f"must be between 0 and 63, got {dscp}")
    return dscp << 2


@dataclass(frozen=True)
class QueueConfig:
    queues: int = 8
    reserved: tuple[int, ...] = (0,)
    scavenger: int | None = -1  # -1: the last band; None: no scavenger band
    dscp: tuple[int, ...] = field(default=())  # band -> DSCP; empty: default table
    admission: ContentionModel | None = field(default_factory=ContentionModel)
    # share of the link each band is guaranteed where strict priority is emulated with
    # HTB (agents, emulated switches): keeps starved TCP flows' ACK clock alive
    min_share: float = 0.001

    def __post_init__(self) -> None:
        if not 2 <= self.queues <= 16:
            raise ConfigError("queues", f"must be between 2 and 16, got {self.queues}")
        if not 0 < self.min_share <= 1 / self.queues:
            raise ConfigError("min_share", f"must be in (0, 1/queues], got {self.min_share}")
        for i, r in enumerate(self.reserved):
            if not 0 <= r < self.queues:
                raise ConfigError(f"reserved[{i}]", f"band {r} out of range 0..{self.queues - 1}")
        if self.scavenger is not None and self.scavenger != -1:
            if not 0 <= self.scavenger < self.queues or self.scavenger in self.reserved:
                raise ConfigError("scavenger", f"band {self.scavenger} is not a free band")
        if not self.data_bands:
            raise ConfigError("queues", "no band left for data after reserved and scavenger")
        table = self.dscp_table
        if len(table) != self.queues:
            raise ConfigError(
                "dscp", f"needs one code point per band ({self.queues}), got {len(table)}"
            )
        for b, d in enumerate(table):
            if not 0 <= d <= 63:
                raise ConfigError(f"dscp[{b}]", f"must be between 0 and 63, got {d}")
        if len(set(table)) != len(table):
            raise ConfigError(
                "dscp", "code points must be distinct so switches can tell bands apart"
            )

    @property
    def scavenger_band(self) -> int | None:
        return self.queues - 1 if self.scavenger == -1 else self.scavenger

    @property
    def data_bands(self) -> tuple[int, ...]:
        skip = set(self.reserved)
        if self.scavenger_band is not None:
            skip.add(self.scavenger_band)
        return tuple(b for b in range(self.queues) if b not in skip)

    @property
    def default_band(self) -> int:
        """Band for traffic the plan does not know: the last data band."""
        return self.data_bands[-1]

    @property
    def dscp_table(self) -> tuple[int, ...]:
        return self.dscp or default_dscp_table(self.queues, self.default_band, self.scavenger_band)

    def unmarked_warning(self) -> str:
        """Why this table hurts traffic nobody marked, or "" (check-config prints it)."""
        table = self.dscp_table
        if 0 not in table:
            return ""
        band = table.index(0)
        if band > self.default_band:
            return (
                f"queues.dscp: DSCP 0 (unmarked traffic: SSH, storage, other jobs) maps to "
                f"band {band}, below every data band: it starves behind scheduled stages"
            )
        return ""


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
    """
    coo = sparse.coo_matrix(loads)
    keep = coo.data > 0
    if active is not None:
        keep &= np.asarray(active, dtype=bool)[coo.row]
    units, ports, vals = coo.row[keep], coo.col[keep], coo.data[keep]
    position = np.empty(loads.shape[0], dtype=np.int64)
    position[np.asarray(order, dtype=np.int64)] = np.arange(len(order))
    pos = position[units]
    idx = np.lexsort((pos, ports))
    units, ports, vals = units[idx], ports[idx], vals[idx]
    # rank within each port group
    group_start = np.r_[0, np.flatnonzero(np.diff(ports)) + 1]
    sizes = np.diff(np.r_[group_start, len(ports)])
    rank = np.arange(len(ports)) - np.repeat(group_start, sizes)

    data = np.asarray(cfg.data_bands, dtype=np.int64)
    nd = len(data)
    if unlimited:
        bands = data[0] + rank
        return PortBands(sparse.csr_matrix((bands + 1, (units, ports)), shape=loads.shape))
    bands = data[np.minimum(rank, nd - 1)]
    if cfg.admission is not None and cfg.scavenger_band is not None:
        # overflow units of a port: the first (in global order) that AdaDUAL admits next
        # to the last band's owner shares that band; the others wait in the scavenger band
        over = np.flatnonzero(rank >= nd)
        if len(over):
            group = np.repeat(np.arange(len(group_start)), sizes)[over]
            owner_load = vals[group_start[group] + nd - 1]
            with np.errstate(divide="ignore", invalid="ignore"):
                ok = (owner_load <= 0) | (vals[over] / owner_load < cfg.admission.share_threshold)
            bands[over] = cfg.scavenger_band
            admitted = over[ok]
            _, first = np.unique(group[ok], return_index=True)
            bands[admitted[first]] = data[nd - 1]
    matrix = sparse.csr_matrix((bands + 1, (units, ports)), shape=loads.shape)
    return PortBands(matrix)


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
