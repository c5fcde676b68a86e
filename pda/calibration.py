"""Fit Wang et al.'s contention model (Eq. 2 and Eq. 5) to measured all-reduce times.

``a`` and ``b`` come from the tasks that ran alone (k = 1): least squares on
``T = a + b M`` with both at least 0 (a negative latency is refitted through the
origin, not clipped). ``eta`` then comes from the tasks that ran k > 1 at a time, with ``a``
and ``b`` held: least squares on ``T - a - k b M = (k - 1) eta M``. This is the paper's
procedure (Fig. 2: "the same a and b in Fig. 2(a) is adopted"). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from common.errors import ConfigError
from pda.admission import ContentionModel


@dataclass(frozen=True)
class Sample:
    """``k`` all-reduces of ``bytes`` each ran together; each took ``seconds`` on average."""

    k: int
    bytes: float
    seconds: float


@dataclass(frozen=True)
class Fit:
    model: ContentionModel  # the constants to use (a and eta clipped at 0)
    # a and b by unconstrained least squares; eta as fitted on the a and b used
    raw: tuple[float, float, float]
    residuals: tuple[dict, ...]  # per sample: k, bytes, measured, predicted, relative

    @property
    def rms_relative(self) -> float:
        r = np.array([x["relative"] for x in self.residuals])
        return float(np.sqrt(np.mean(r**2))) if len(r) else 0.0

    @property
    def max_relative(self) -> float:
        return float(max((abs(x["relative"]) for x in self.residuals), default=0.0))


def fit_contention(samples: Sequence[Sample]) -> Fit:
    alone = [s for s in samples if s.k == 1]
    shared = [s for s in samples if s.k > 1]
    if len({s.bytes for s in alone}) < 2:
        raise ConfigError("samples", "a and b need tasks alone (k = 1) of two sizes or more")
    if not shared:
        raise ConfigError("samples", "eta needs tasks that ran together (k > 1)")
    m = np.array([s.bytes for s in alone])
    t = np.array([s.seconds for s in alone])
    design = np.c_[m, np.ones_like(m)]
    (b_raw, a_raw), *_ = np.linalg.lstsq(design, t, rcond=None)
    (b, a), _ = nnls(design, t)  # the constants used: a >= 0 and b >= 0, fitted so
    if not b > 0:
        raise ConfigError("samples", f"time does not grow with size alone (b = {b_raw:.3g})")
    k = np.array([s.k for s in shared], dtype=float)
    ms = np.array([s.bytes for s in shared])
    x = (k - 1) * ms
    rest = np.array([s.seconds for s in shared]) - a - k * b * ms
    eta = float(x @ rest / (x @ x))  # one unknown: the constrained fit is max(eta, 0)
    model = ContentionModel(float(a), float(b), max(eta, 0.0))
    residuals = tuple(
        {
            "k": s.k,
            "bytes": s.bytes,
            "measured": s.seconds,
            "predicted": (p := model.time(s.k, s.bytes)),
            "relative": (s.seconds - p) / p,
        }
        for s in samples
    )
    return Fit(model, (float(a_raw), float(b_raw), eta), residuals)
