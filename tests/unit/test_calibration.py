"""The contention fit (``grouper calibrate``'s arithmetic) on synthetic data."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from pda.admission import ContentionModel
from pda.calibration import Sample, fit_contention

TRUE = ContentionModel(a=2e-3, b=4e-7, eta=1.5e-7)
SIZES = (250e3, 500e3, 1e6)


def synthetic(model: ContentionModel) -> list[Sample]:
    return [Sample(k, m, model.time(k, m)) for m in SIZES for k in range(1, 9)]


def test_known_constants_are_recovered_exactly():
    fit = fit_contention(synthetic(TRUE))
    assert fit.raw == pytest.approx((TRUE.a, TRUE.b, TRUE.eta), rel=1e-9)
    m = fit.model
    assert (m.a, m.b, m.eta) == pytest.approx((TRUE.a, TRUE.b, TRUE.eta), rel=1e-9)
    assert fit.max_relative < 1e-9


def test_residuals_report_what_the_model_misses():
    samples = synthetic(TRUE)
    samples[-1] = Sample(8, SIZES[-1], samples[-1].seconds * 1.2)  # one slow point
    fit = fit_contention(samples)
    worst = max(fit.residuals, key=lambda r: abs(r["relative"]))
    assert (worst["k"], worst["bytes"]) == (8, SIZES[-1])
    assert fit.rms_relative > 0


def test_no_contention_penalty_clips_eta_at_zero():
    ideal = [Sample(k, m, 1e-3 + k * 4e-7 * m * 0.9) if k > 1 else Sample(k, m, 1e-3 + 4e-7 * m)
             for m in SIZES for k in range(1, 4)]  # fmt: skip
    fit = fit_contention(ideal)
    assert fit.raw[2] < 0 and fit.model.eta == 0.0


@pytest.mark.parametrize(
    "samples",
    [
        [Sample(1, 1e6, 1.0), Sample(2, 1e6, 2.0)],  # one size alone
        [Sample(1, 1e6, 1.0), Sample(1, 2e6, 2.0)],  # nothing shared
        [Sample(1, 1e6, 2.0), Sample(1, 2e6, 1.0), Sample(2, 1e6, 2.0)],  # b < 0
    ],
)
def test_unusable_measurements_are_refused(samples):
    with pytest.raises(ConfigError, match="samples"):
        fit_contention(samples)
