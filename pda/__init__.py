"""Pure scheduling core: model, PDA ordering, AdaDUAL admission, local priorities.

No I/O, no gRPC, no kernel: the coordinator and the simulator call the same code.
"""

from pda.admission import ContentionModel, adadual_admit
from pda.model import Cojob, FlowSpec, Job
from pda.order import OrderResult, pda_order, primal_dual_order, stage_weights
from pda.priorities import QueueConfig, map_priorities
from pda.snapshot import Snapshot, build_snapshot

__all__ = [
    "Cojob",
    "ContentionModel",
    "FlowSpec",
    "Job",
    "OrderResult",
    "QueueConfig",
    "Snapshot",
    "adadual_admit",
    "build_snapshot",
    "map_priorities",
    "pda_order",
    "primal_dual_order",
    "stage_weights",
]
