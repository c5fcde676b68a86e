"""AdaDUAL: decisions and the closed forms of Theorems 1 and 2, checked numerically."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.pda.admission import adadual_admit, two_task_average

MODEL = ContentionModel(a=0.0, b=1.0, eta=0.5)  # threshold b / 2(b+eta) = 1/3


def avg(first, second, start, model=MODEL):
    t1, t2 = two_task_average(first, second, start, model)
    return (t1 + t2) / 2


def test_decisions_for_zero_one_and_two_existing_tasks():
    assert adadual_admit(10.0, [], MODEL)
    assert adadual_admit(3.0, [10.0], MODEL)  # 0.3 < 1/3
    assert not adadual_admit(4.0, [10.0], MODEL)  # 0.4 >= 1/3
    assert not adadual_admit(1.0, [10.0, 10.0], MODEL)
    assert adadual_admit(1.0, [0.0], MODEL), "finished tasks do not count"


def test_eq5_contention_time():
    m = ContentionModel(a=1e-3, b=2e-9, eta=1e-9)
    assert m.time(1, 1e9) == pytest.approx(1e-3 + 2.0)
    assert m.time(3, 1e9) == pytest.approx(1e-3 + 6.0 + 2.0)


@settings(max_examples=80, deadline=None)
@given(m1=st.floats(1.0, 100.0), ratio=st.floats(1.0, 10.0), eta=st.floats(0.0, 2.0))
def test_theorem_1_small_first_then_large_after_it(m1, ratio, eta):
    model = ContentionModel(a=0.0, b=1.0, eta=eta)
    m2 = m1 * ratio  # M1 <= M2
    grid = np.linspace(0.0, model.b * m1, 201)
    values = [avg(m1, m2, t, model) for t in grid]
    best = int(np.argmin(values))
    assert grid[best] == pytest.approx(model.b * m1)  # t = t1
    assert values[best] == pytest.approx((2 * model.b * m1 + model.b * m2) / 2)  # Eq. 14a


@settings(max_examples=80, deadline=None)
@given(m1=st.floats(1.0, 100.0), ratio=st.floats(1.0, 10.0), eta=st.floats(0.0, 2.0))
def test_theorem_2_large_first_share_only_below_threshold(m1, ratio, eta):
    model = ContentionModel(a=0.0, b=1.0, eta=eta)
    m2 = m1 * ratio
    b = model.b
    grid = np.linspace(0.0, b * m2, 401)
    values = [avg(m2, m1, t, model) for t in grid]  # c2 (large) first, c1 at t
    c2a = ((3 * b + 2 * eta) * m1 + b * m2) / 2  # Eq. 14b, t = 0
    c2b = (b * m1 + 2 * b * m2) / 2  # Eq. 14c, t = t2
    assert values[0] == pytest.approx(c2a)
    assert values[-1] == pytest.approx(c2b)
    assert min(values) == pytest.approx(min(c2a, c2b))
    share = m1 / m2 < b / (2 * (b + eta))
    assert (c2a < c2b) == share or c2a == pytest.approx(c2b)
    # and AdaDUAL's decision for the small task arriving next to the large one agrees
    assert adadual_admit(m1, [m2], model) == share


def test_bad_model_parameters_are_named():
    with pytest.raises(ConfigError, match="^b: must be positive"):
        ContentionModel(b=0.0)
    with pytest.raises(ConfigError, match="^eta:"):
        ContentionModel(eta=-1.0)
