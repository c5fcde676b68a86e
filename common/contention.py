"""The contention model of AdaDUAL (Wang et al. 2020, Eq. 5): ``k`` concurrent
communication tasks of ``M`` bytes each take ``a + k*b*M + (k-1)*eta*M``.

Its constants are configuration (``admission:`` in a cluster config or a workload,
written by ``grouper calibrate``); the admission rule that uses them is
:mod:`pda.admission`.
"""

from __future__ import annotations

from dataclasses import dataclass

from grouper.common.errors import ConfigError


@dataclass(frozen=True)
class ContentionModel:
    """Per-task latency ``a`` (s), seconds per byte ``b``, contention penalty ``eta``."""

    a: float = 6.69e-4
    b: float = 8.53e-10
    eta: float = 3.0e-10

    def __post_init__(self) -> None:
        if not self.a >= 0:
            raise ConfigError("a", f"must be at least 0, got {self.a!r}")
        if not self.b > 0:
            raise ConfigError("b", f"must be positive, got {self.b!r}")
        if not self.eta >= 0:
            raise ConfigError("eta", f"must be at least 0, got {self.eta!r}")

    def time(self, k: int, message_bytes: float) -> float:
        """Eq. 5: time for ``k`` concurrent tasks of ``message_bytes`` each."""
        return self.a + k * self.b * message_bytes + (k - 1) * self.eta * message_bytes

    @property
    def share_threshold(self) -> float:
        """Theorem 2: share when M_new / M_old < b / (2 (b + eta))."""
        return self.b / (2.0 * (self.b + self.eta))

    def shared_seconds_per_byte(self, k: int) -> float:
        """Seconds per byte of each of ``k`` tasks that run together (Eq. 5 without a)."""
        return k * self.b + (k - 1) * self.eta
