"""``grouper emulate --runs N``: a policy's runs merged into one result."""

from types import SimpleNamespace

import pytest

from grouper.experiments.emulate import _compare, merge_runs


def _run(sct_a: float, sct_b: float, steal: float, worst: float, timeouts: int) -> dict:
    stages = [  # the replay lists stages by end time, so the order may differ per run
        {"cojob": "a", "stage": 1, "sct": sct_a, "duration": sct_a},
        {"cojob": "b", "stage": 1, "sct": sct_b, "duration": sct_b},
    ]
    stages.sort(key=lambda s: s["sct"])
    return {
        "avg_sct": (sct_a + sct_b) / 2,
        "avg_jct": sct_a + sct_b,
        "stages": 2,
        "stage_times": stages,
        "bytes": 100,
        "bytes_missing": 0,
        "band_bytes": {},
        "tcp": {"timeouts": timeouts},
        "cpu_steal": {"mean": steal, "max": worst},
    }


def test_one_run_is_its_own_result():
    run = _run(1.0, 2.0, 0.1, 0.3, 5)
    assert merge_runs([run]) is run


def test_runs_merge_by_stage_not_by_position_with_means_and_the_worst_steal():
    runs = [_run(1.0, 3.0, 0.1, 0.3, 4), _run(4.0, 2.0, 0.3, 0.9, 6)]
    m = merge_runs(runs)
    assert m["avg_sct"] == pytest.approx(2.5)
    assert (m["avg_sct_min"], m["avg_sct_max"]) == (2.0, 3.0)
    assert m["avg_sct_runs"] == [2.0, 3.0]
    stages = {(s["cojob"], s["stage"]): s for s in m["stage_times"]}
    assert stages[("a", 1)]["sct"] == pytest.approx(2.5)
    assert stages[("a", 1)]["sct_runs"] == [1.0, 4.0]
    assert stages[("b", 1)]["duration"] == pytest.approx(2.5)
    assert m["tcp"] == {"timeouts": 5}
    assert m["cpu_steal"] == {"mean": pytest.approx(0.2), "max": 0.9}
    assert m["runs"] == runs


def test_each_stage_is_compared_with_the_simulators_sct_of_that_stage():
    measured = merge_runs([_run(2.0, 4.0, 0.0, 0.0, 0)])
    sim = SimpleNamespace(
        summary={"avg_sct": 2.5},
        result=SimpleNamespace(
            stages=[  # listed in another order than the measured ones
                {"cojob": "b", "stage": 1, "sct": 3.0, "alone": 3.0},
                {"cojob": "a", "stage": 1, "sct": 2.0, "alone": 1.0},
            ]
        ),
    )
    c = _compare(measured, sim)
    assert {s["cojob"]: s["predicted_sct"] for s in c["stage_times"]} == {"a": 2.0, "b": 3.0}
    assert c["prediction_error"] == pytest.approx((2.5 - 3.0) / 3.0)
    assert c["avg_slowdown"] == pytest.approx((2.0 / 1.0 + 4.0 / 3.0) / 2)
