"""Where a job's GPUs go (Wang et al. 2020, Section IV-A and V-A baselines).

* ``rand``: GPUs drawn at random among those with room for the job.
* ``ff``: First-Fit, the first GPUs with room in cluster order.
* ``ls``: List Scheduling, the GPUs with the least remaining workload.
* ``lwf:K``: LWF-kappa (Algorithm 1), list scheduling for jobs of at most K GPUs,
  server by server (least loaded servers first) for larger ones.

The GPU choices themselves live in :mod:`workloads.placement`, shared with the
stage-level generators.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grouper.common.errors import ConfigError
from grouper.workloads.placement import first_fit, least_loaded, lwf_kappa

KINDS = ("rand", "ff", "ls", "lwf")


@dataclass(frozen=True)
class Placement:
    kind: str
    kappa: int = 1

    @property
    def name(self) -> str:
        return f"lwf:{self.kappa}" if self.kind == "lwf" else self.kind

    def choose(
        self,
        n: int,
        load: np.ndarray,
        free: np.ndarray,
        per_server: int,
        rng: np.random.Generator,
    ) -> np.ndarray | None:
        """``n`` GPUs among ``free`` ones, or None when the job cannot be placed now."""
        if self.kind == "ff":
            return first_fit(n, free)
        if self.kind == "ls":
            return least_loaded(n, load, free)
        if self.kind == "lwf":
            return lwf_kappa(n, self.kappa, load, free, per_server)
        idx = np.flatnonzero(free)
        if len(idx) < n:
            return None
        return np.sort(rng.choice(idx, size=n, replace=False))


def parse_placement(spec: str, path: str = "--placement") -> Placement:
    kind, sep, arg = spec.strip().partition(":")
    if kind not in KINDS:
        raise ConfigError(path, f"must be one of rand, ff, ls, lwf:K; got {spec!r}")
    if kind != "lwf":
        if sep:
            raise ConfigError(path, f"{kind} takes no parameter, got {spec!r}")
        return Placement(kind)
    if not arg.isdigit() or not 1 <= int(arg) <= 4096:
        raise ConfigError(path, f"lwf:K needs K a whole number from 1 to 4096, got {spec!r}")
    return Placement("lwf", int(arg))
