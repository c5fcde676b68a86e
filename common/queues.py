"""A host's queues: how many bands, which are reserved, the scavenger, band -> DSCP.

Part of the cluster configuration (``queues:``), read by the agent, the coordinator, the
emulation and the switch configuration. Kept free of SciPy and numba: the agent imports
this and nothing else of ``pda/``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError


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
