"""Which waiting all-reduces may start now (Wang et al. 2020, Section IV-B and V-A).

* ``srsf:N``: SRSF(n), an all-reduce starts when every server it uses carries fewer
  than N running all-reduces (N = 1 avoids all contention; 2 and 3 accept it blindly).
* ``ada-srsf``: AdaDUAL (Algorithm 2) decides: start on idle servers; next to exactly
  one running all-reduce only when ``M_new / M_old < b / (2 (b + eta))`` (Theorem 2);
  never next to two or more. A job spanning several servers that carry different single
  all-reduces must pass the test against each of them (Algorithm 2 looks at one; with
  more, the new task would share with each, so each pair must gain).

Candidates are visited in SRSF order (Algorithm 3, lines 15-21), each decision seeing
the all-reduces started before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.pda.admission import adadual_admit


@dataclass(frozen=True)
class CommScheduler:
    kind: str  # "srsf" or "ada-srsf"
    limit: int = 1

    @property
    def name(self) -> str:
        return f"srsf:{self.limit}" if self.kind == "srsf" else "ada-srsf"

    def admit(
        self,
        new_bytes: float,
        loads: list[int],
        others_remaining: Callable[[], list[float]],
        model: ContentionModel,
    ) -> bool:
        """``loads``: running all-reduces on each of the job's servers;
        ``others_remaining``: the remaining bytes of each distinct one of them."""
        busiest = max(loads)
        if self.kind == "srsf":
            return busiest < self.limit
        if busiest == 0:
            return True
        if busiest > 1:
            return False
        return all(adadual_admit(new_bytes, [m], model) for m in others_remaining())


def parse_scheduler(spec: str, path: str = "--scheduler") -> CommScheduler:
    spec = spec.strip()
    if spec == "ada-srsf":
        return CommScheduler("ada-srsf")
    kind, _, arg = spec.partition(":")
    if kind != "srsf" or not arg.isdigit() or not 1 <= int(arg) <= 64:
        raise ConfigError(path, f"must be srsf:N (N from 1 to 64) or ada-srsf, got {spec!r}")
    return CommScheduler("srsf", int(arg))
