"""Fit Wang et al.'s contention model (Eq. 2 and Eq. 5) to measured all-reduce times.

``a`` and ``b`` come from the tasks that ran alone (k = 1): least squares on
``T = a + b M`` with both at least 0 (a negative latency is refitted through the
origin, not clipped). ``eta`` then comes from the tasks that ran k > 1 at a time, with ``a``
and ``b`` held: least squares on ``T - a - k b M = (k - 1) eta M``. Both fits weigh each
point by 1 / T, so they minimise relative errors (timing noise grows with the time: an
unweighted fit let the largest points set b and reported intervals that covered the
true b in 80% of synthetic runs at a nominal 95%). This is the paper's
procedure (Fig. 2: "the same a and b in Fig. 2(a) is adopted"). Pure: no I/O.

Each unconstrained estimate comes with its 95% confidence interval (Student's t on the
fit's own residuals: ``n - 2`` degrees of freedom for a and b from n sizes alone;
eta's interval also carries a's and b's uncertainty). :meth:`Fit.problems` says why
a fit is not a measurement to store: a parameter at its bound, an interval that reaches
the bound or is wide, or points the model misses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls
from scipy.stats import t as student_t

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError

LEVEL = 0.95  # confidence of the reported intervals
MAX_RMS = 0.10  # a fit missing its points by more (relative, rms) is poor
MAX_B_SPREAD = 0.10  # b's interval half-width, relative to b, above which b is unknown

Interval = tuple[float, float]  # (low, high) at LEVEL; None where no residual is left


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
    # LEVEL intervals of the raw a, b and eta; None: no degree of freedom left
    intervals: tuple[Interval | None, Interval | None, Interval | None] = (None, None, None)

    @property
    def rms_relative(self) -> float:
        r = np.array([x["relative"] for x in self.residuals])
        return float(np.sqrt(np.mean(r**2))) if len(r) else 0.0

    @property
    def max_relative(self) -> float:
        return float(max((abs(x["relative"]) for x in self.residuals), default=0.0))

    def problems(self) -> list[str]:
        """Why these constants are not a measurement to store, worst first ([] if none):
        each names the parameter and its figure, then what to try."""
        a, b, eta = self.raw
        ia, ib, ie = self.intervals
        out = []
        if a <= 0:
            out.append(f"a sits at its bound 0 (fit {a:.2g} s); try smaller --sizes")
        elif ia is not None and ia[0] <= 0:
            out.append(f"a = {a:.2g} s is not told from 0 ({_iv(ia)}); try smaller --sizes")
        if eta <= 0:
            out.append(
                f"eta sits at its bound 0 (fit {eta:.2g} s/B: k tasks took at most k times "
                "one); try --pattern star or other --hosts, or set eta by hand"
            )
        elif ie is not None and ie[0] <= 0:
            out.append(f"eta = {eta:.2g} s/B is not told from 0 ({_iv(ie)}); try more --reps")
        if ib is None:
            out.append("a and b have no confidence (two sizes alone fit exactly); try 3+ --sizes")
        elif (spread := (ib[1] - ib[0]) / 2 / b) > MAX_B_SPREAD:
            out.append(f"b is uncertain by +-{spread:.0%} ({_iv(ib)}); try more --sizes or --reps")
        if self.rms_relative > MAX_RMS:
            out.append(
                f"the model misses the points by {self.rms_relative:.0%} rms (limit "
                f"{MAX_RMS:.0%}); try an idle network and more --reps"
            )
        return out


def _iv(iv: Interval) -> str:
    return f"{LEVEL:.0%} interval {iv[0]:.2g} to {iv[1]:.2g}"


def _half_width(variance: float, dof: int) -> float:
    return float(student_t.ppf(0.5 + LEVEL / 2, dof) * np.sqrt(variance))


@dataclass(frozen=True)
class _Alone:
    """The k = 1 fit: raw and constrained a and b, the raw values' covariance."""

    raw: tuple[float, float]  # a, b
    used: tuple[float, float]
    cov: np.ndarray  # of (b, a); NaN without a degree of freedom
    dof: int


def _fit_alone(alone: Sequence[Sample]) -> _Alone:
    """``T = a + b M`` by least squares on relative errors (each point weighted by 1 / T:
    timing noise grows with the time), unconstrained and with a, b >= 0."""
    m = np.array([s.bytes for s in alone])
    t = np.array([s.seconds for s in alone])
    design = np.c_[m, np.ones_like(m)] / t[:, None]
    (b_raw, a_raw), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    (b, a), _ = nnls(design, np.ones_like(t))
    if not b > 0:
        raise ConfigError("samples", f"time does not grow with size alone (b = {b_raw:.3g})")
    dof = len(alone) - 2
    cov = np.full((2, 2), np.nan)
    if dof > 0:
        resid = 1 - design @ np.array([b_raw, a_raw])
        cov = float(resid @ resid) / dof * np.linalg.inv(design.T @ design)
    return _Alone((float(a_raw), float(b_raw)), (float(a), float(b)), cov, dof)


def _fit_eta(shared: Sequence[Sample], fit: _Alone) -> tuple[float, Interval | None]:
    """``T - a - k b M = (k - 1) eta M`` on relative errors, a and b held; the interval
    takes in the uncertainty of a and b (eta is linear in them)."""
    a, b = fit.used
    k = np.array([s.k for s in shared], dtype=float)
    m = np.array([s.bytes for s in shared])
    w = 1 / np.array([s.seconds for s in shared])
    x = (k - 1) * m * w
    rest = 1 - (a + k * b * m) * w
    xx = float(x @ x)
    eta = float(x @ rest) / xx  # one unknown: the constrained fit is max(eta, 0)
    if fit.dof <= 0 or len(shared) < 2:
        return eta, None
    r = rest - eta * x
    alpha, beta = float(x @ w) / xx, float(x @ (k * m * w)) / xx  # d eta / d a, -d b
    cov = fit.cov
    var = float(r @ r) / (len(x) - 1) / xx
    var += alpha**2 * cov[1, 1] + beta**2 * cov[0, 0] + 2 * alpha * beta * cov[0, 1]
    h = _half_width(var, min(fit.dof, len(x) - 1))
    return eta, (eta - h, eta + h)


def fit_contention(samples: Sequence[Sample]) -> Fit:
    alone = [s for s in samples if s.k == 1]
    shared = [s for s in samples if s.k > 1]
    if len({s.bytes for s in alone}) < 2:
        raise ConfigError("samples", "a and b need tasks alone (k = 1) of two sizes or more")
    if not shared:
        raise ConfigError("samples", "eta needs tasks that ran together (k > 1)")
    ab = _fit_alone(alone)
    eta, ie = _fit_eta(shared, ab)
    ia = ib = None
    if ab.dof > 0:
        ha, hb = (_half_width(ab.cov[i, i], ab.dof) for i in (1, 0))
        (a_raw, b_raw) = ab.raw
        ia, ib = (a_raw - ha, a_raw + ha), (b_raw - hb, b_raw + hb)
    model = ContentionModel(*ab.used, max(eta, 0.0))
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
    return Fit(model, (*ab.raw, eta), residuals, (ia, ib, ie))
