"""The contention fit (``grouper calibrate``'s arithmetic) on synthetic data."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from grouper.common.contention import ContentionModel
from grouper.common.errors import ConfigError
from grouper.pda.calibration import Sample, fit_contention

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


def test_a_negative_latency_is_refitted_through_the_origin():
    # super-linear alone (a large task loses packets): unconstrained a < 0
    alone = [Sample(1, 0.25e6, 0.105), Sample(1, 0.5e6, 0.21), Sample(1, 1e6, 0.5)]
    fit = fit_contention([*alone, Sample(2, 0.5e6, 0.42)])
    assert fit.raw[0] < 0
    # through the origin on relative errors: minimise sum((b M / T - 1)^2)
    b = sum(s.bytes / s.seconds for s in alone) / sum((s.bytes / s.seconds) ** 2 for s in alone)
    assert (fit.model.a, fit.model.b) == (0.0, pytest.approx(b, rel=1e-9))
    assert any(p.startswith("a sits at its bound 0") for p in fit.problems())


NOISY = ContentionModel(a=2e-2, b=4e-7, eta=1.5e-7)
NOISY_SIZES = (50e3, 100e3, 250e3, 500e3, 1e6)


def noisy(model: ContentionModel, seed: int, noise: float = 0.01) -> list[Sample]:
    """Every point of k = 1..8 at five sizes, each off by Gaussian relative noise."""
    rng = np.random.default_rng(seed)
    return [
        Sample(k, m, model.time(k, m) * (1 + noise * rng.standard_normal()))
        for m in NOISY_SIZES
        for k in range(1, 9)
    ]


@pytest.mark.parametrize("seed", range(20))
def test_noisy_measurements_recover_known_constants_within_10_percent(seed):
    """1% timing noise per point: a, b and eta within 10% of the truth, each inside
    its reported interval's reach, and nothing that would stop --write."""
    fit = fit_contention(noisy(NOISY, seed))
    truth = (NOISY.a, NOISY.b, NOISY.eta)
    assert fit.raw == pytest.approx(truth, rel=0.10)
    assert (fit.model.a, fit.model.b, fit.model.eta) == pytest.approx(truth, rel=0.10)
    assert all(iv is not None and iv[0] < iv[1] for iv in fit.intervals)
    assert fit.problems() == []


def test_intervals_cover_the_truth_about_as_often_as_they_say():
    """Over 200 noisy runs each 95% interval holds the true value in 90-99% of them
    (an unweighted fit's b interval held it in 80%; one ignoring a's and b's
    uncertainty in eta's, 27%)."""
    truth = (NOISY.a, NOISY.b, NOISY.eta)
    hits = np.zeros(3)
    for seed in range(200):
        fit = fit_contention(noisy(NOISY, 1000 + seed))
        hits += [lo <= x <= hi for (lo, hi), x in zip(fit.intervals, truth, strict=True)]
    assert all(180 <= h <= 198 for h in hits), hits


def test_a_fit_pinned_at_a_bound_or_poor_is_not_fit_to_store():
    # k tasks faster than k x one (eta < 0, as on the emulated fabric): pinned at 0
    faster = [Sample(k, m, 1e-3 + k * 4e-7 * m * (0.9 if k > 1 else 1))
              for m in SIZES for k in range(1, 4)]  # fmt: skip
    assert fit_contention(faster).problems()[0].startswith("eta sits at its bound 0 (fit -")
    # no penalty at all, with noise: eta lands at 0 or cannot be told from it
    problems = fit_contention(noisy(ContentionModel(a=2e-2, b=4e-7, eta=0.0), 3)).problems()
    assert problems and problems[0].startswith("eta "), problems
    loud = fit_contention(noisy(NOISY, 3, noise=0.3)).problems()
    assert any("rms (limit 10%)" in p for p in loud), loud
    two_sizes = [s for s in synthetic(TRUE) if s.bytes != SIZES[0]]
    assert fit_contention(two_sizes).problems() == [
        "a and b have no confidence (two sizes alone fit exactly); try 3+ --sizes"
    ]
    assert fit_contention(synthetic(TRUE)).problems() == []


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


SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "cluster.sample.yaml"


def test_write_admission_keeps_comments_order_and_the_rest(tmp_path):
    from grouper.common.cluster_config import load_cluster_config
    from grouper.experiments.calibrate_report import write_admission

    path = tmp_path / "cluster.yaml"
    path.write_text(SAMPLE.read_text())
    write_admission(path, ContentionModel(a=1.5e-3, b=4.2e-7, eta=1.1e-7))
    cfg = load_cluster_config(str(path))
    m = cfg.queues.admission
    assert (m.a, m.b, m.eta) == (1.5e-3, 4.2e-7, 1.1e-7)
    before, after = SAMPLE.read_text().splitlines(), path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert [a.split(":")[0].strip() for a, _ in changed] == ["a", "b", "eta"]
    assert all("#" in b for _, b in changed)  # the comments after the values stay
    assert cfg.hosts == load_cluster_config(str(SAMPLE)).hosts


def test_write_admission_adds_the_section_when_missing(tmp_path):
    from grouper.common.cluster_config import load_cluster_config
    from grouper.experiments.calibrate_report import write_admission

    text = SAMPLE.read_text()
    start = text.index("admission:")
    path = tmp_path / "cluster.yaml"
    path.write_text(text[:start] + text[text.index("failure:") :])
    write_admission(path, ContentionModel(a=0.0, b=4e-7, eta=0.0))
    m = load_cluster_config(str(path)).queues.admission
    assert (m.a, m.b, m.eta) == (0.0, 4e-7, 0.0)
    assert "# priority queues per port" in path.read_text()


def test_write_admission_updates_a_flow_style_section_as_the_readme_writes_it(tmp_path):
    """The README's sample has ``admission: {enabled: true, a: ..., b: ..., eta: ...}``;
    calibrate once measured for minutes and then refused it."""
    from grouper.common.cluster_config import load_cluster_config
    from grouper.experiments.calibrate_report import write_admission

    text = SAMPLE.read_text()
    start, end = text.index("admission:"), text.index("failure:")
    flow = "admission: {enabled: true, a: 6.69e-4, b: 8.53e-10, eta: 3.0e-10}  # measured\n"
    path = tmp_path / "cluster.yaml"
    path.write_text(text[:start] + flow + text[end:])
    write_admission(path, ContentionModel(a=0.0, b=4e-7, eta=0.0), dry_run=True)
    assert path.read_text() == text[:start] + flow + text[end:], "a dry run writes nothing"
    write_admission(path, ContentionModel(a=1.5e-3, b=4e-7, eta=2e-9))
    m = load_cluster_config(str(path)).queues.admission
    assert (m.a, m.b, m.eta) == (1.5e-3, 4e-7, 2e-9)
    line = next(ln for ln in path.read_text().splitlines() if ln.startswith("admission:"))
    assert line.startswith("admission: {enabled: true, a: 0.0015,") and "# measured" in line


def test_calibrate_refuses_a_file_it_cannot_update_before_measuring(tmp_path):
    """A multi-line flow section cannot be updated in place: exit 2 at once, naming it
    (the measurement would otherwise run for minutes first)."""
    import subprocess
    import sys

    text = SAMPLE.read_text()
    start, end = text.index("admission:"), text.index("failure:")
    path = tmp_path / "cluster.yaml"
    path.write_text(text[:start] + "admission: {enabled: true,\n  a: 1e-3}\n" + text[end:])
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "calibrate", "--write", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (
        "grouper: error: admission: spans several lines in flow style; write it as a block\n"
    )


def test_simulate_uses_the_cluster_configs_constants(tmp_path):
    import json

    from grouper.cli.main import main
    from grouper.experiments.calibrate_report import write_admission

    cfg = tmp_path / "cluster.yaml"
    cfg.write_text(SAMPLE.read_text())
    write_admission(cfg, ContentionModel(a=1e-3, b=2e-9, eta=1e-9))
    out = tmp_path / "r.json"
    argv = ["simulate", "--workload", "builtin:fig3", "--policies", "fs,grouper",
            "--config", str(cfg), "--json", str(out), "--out", str(tmp_path / "s")]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(out.read_text())["admission"] == {"a": 1e-3, "b": 2e-9, "eta": 1e-9}
    argv = ["simulate", "--mode", "jobs", "--workload", "builtin:wang-64gpu", "--config",
            str(cfg), "--placement", "lwf:1", "--iteration-batch", "50", "--json", str(out),
            "--out", str(tmp_path / "j")]  # fmt: skip
    assert main(argv) == 0
    assert json.loads(out.read_text())["contention"] == {"a": 1e-3, "b": 2e-9, "eta": 1e-9}


def test_star_tasks_come_from_every_other_host_in_turn():
    from grouper.common.queues import QueueConfig
    from grouper.experiments.calibrate import task_pairs
    from grouper.experiments.spec import load_experiment, spec_of

    spec = spec_of(load_experiment("builtin:small"), QueueConfig())
    assert task_pairs(spec.host_names, ("h1", "h4"), 2, star=False) == [("h1", "h4")] * 2
    star = task_pairs(spec.host_names, ("h1", "h4"), 6, star=True)
    assert star == [("h2", "h1"), ("h3", "h1"), ("h4", "h1"), ("h5", "h1"), ("h6", "h1"),
                    ("h2", "h1")]  # fmt: skip


def _calibrate_on(monkeypatch, samples: list[Sample], tmp_path: Path, capsys) -> tuple:
    """``grouper calibrate --write`` with the fabric's measurement replaced by ``samples``."""
    import json

    import grouper.cli.calibrate
    from grouper.cli.main import main

    about = {"experiment": "synthetic", "hosts": ["h1", "h4"], "link_mbps": 20.0}
    monkeypatch.setattr(grouper.cli.calibrate, "_on_fabric", lambda args, sizes: (about, samples))
    cfg, out = tmp_path / "cluster.yaml", tmp_path / "cal.json"
    cfg.write_text(SAMPLE.read_text())
    argv = ["calibrate", "--write", str(cfg), "--json", str(out), "--out", str(tmp_path)]
    status = main(argv)
    return status, capsys.readouterr().err, json.loads(out.read_text()), cfg.read_text()


def test_calibrate_refuses_to_write_a_fit_at_its_bound(monkeypatch, tmp_path, capsys):
    """The emulated fabric's fit (eta < 0 unconstrained, clipped to 0) is measured and
    reported, never stored: exit 2, one line saying why and what to try."""
    faster = [Sample(k, m, 1e-3 + k * 4e-7 * m * (0.9 if k > 1 else 1))
              for m in SIZES for k in range(1, 4)]  # fmt: skip
    status, err, res, text = _calibrate_on(monkeypatch, faster, tmp_path, capsys)
    assert status == 2
    assert err.startswith("grouper: error: --write: not written: eta sits at its bound 0")
    assert "try --pattern star" in err and err.count("\n") == 1
    assert text == SAMPLE.read_text(), "the config is untouched"
    assert res["written"] is None and res["problems"][0] in err
    assert res["raw"]["eta"] < 0 and res["confidence"]["level"] == 0.95


def test_calibrate_writes_a_sound_fit_with_its_confidence(monkeypatch, tmp_path, capsys):
    from grouper.common.cluster_config import load_cluster_config

    status, err, res, _ = _calibrate_on(monkeypatch, noisy(NOISY, 0), tmp_path, capsys)
    assert (status, err, res["problems"]) == (0, "", [])
    written = load_cluster_config(res["written"]).queues.admission
    assert (written.a, written.b, written.eta) == pytest.approx(
        (res["a"], res["b"], res["eta"]), rel=1e-3
    )
    for name in ("a", "b", "eta"):
        low, high = res["confidence"][name]
        assert low < res["raw"][name] < high
