"""The one DSCP -> egress queue mapping of a cluster's switches, from its ``queues:``.

Everything that configures a switch port reads it: ``grouper switch-config`` (SONiC,
EOS, Cumulus) and the emulated fabric's tc queues (``topologies.leafspine``), so what
the emulation measures is what operators are told to configure.

Bands are grouper's (0 = highest priority). Switch ASICs serve strict-priority queues
highest index first (SONiC/SAI, Arista EOS tx-queues, Cumulus traffic classes alike), so
band ``b`` of ``n`` goes to hardware queue (and traffic class) ``n - 1 - b``. A DSCP the
table does not name lands in the default band (the lowest data band), as the emulated
ports' ``htb default`` class does.
"""

from __future__ import annotations

from dataclasses import dataclass

from grouper.common.errors import ConfigError
from grouper.common.queues import QueueConfig

DSCP_VALUES = 64
SWITCH_QUEUES = 8  # egress queues per port on the switches we write configuration for


@dataclass(frozen=True)
class SwitchQueueMap:
    queues: int  # bands, one egress queue each
    table: tuple[int, ...]  # band -> DSCP (the cluster's table, in band order)
    default_band: int  # band of every DSCP the table does not name

    def band_of(self, dscp: int) -> int:
        return self.table.index(dscp) if dscp in self.table else self.default_band

    def queue_of(self, band: int) -> int:
        """Hardware queue (= traffic class) of ``band``: higher index, higher priority."""
        return self.queues - 1 - band

    def dscp_to_band(self) -> dict[int, int]:
        """All 64 code points -> band."""
        return {d: self.band_of(d) for d in range(DSCP_VALUES)}

    def dscp_to_queue(self) -> dict[int, int]:
        """All 64 code points -> hardware queue (what a switch's DSCP map must say)."""
        return {d: self.queue_of(b) for d, b in self.dscp_to_band().items()}


def switch_queue_map(queues: QueueConfig) -> SwitchQueueMap:
    return SwitchQueueMap(queues.queues, tuple(queues.dscp_table), queues.default_band)


def hardware_queue_map(queues: QueueConfig, path: str = "queues.count") -> SwitchQueueMap:
    """The map for a real switch: at most ``SWITCH_QUEUES`` queues per port."""
    if queues.queues > SWITCH_QUEUES:
        raise ConfigError(
            path, f"switches have {SWITCH_QUEUES} egress queues per port, got {queues.queues}"
        )
    return switch_queue_map(queues)
