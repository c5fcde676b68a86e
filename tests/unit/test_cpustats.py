"""Steal time read from /proc/stat: parsing, shares, and the sampling monitor."""

import time

import pytest

from grouper.experiments.cpustats import StealMonitor, read_cpu, stolen_share


def test_read_cpu_takes_steal_and_leaves_guest_time_out_of_the_total(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 5 35 999 999\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert read_cpu(stat) == (35, 1000)


def test_read_cpu_without_a_steal_field_counts_none_stolen(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800\n")
    assert read_cpu(stat) == (0, 950)


def test_read_cpu_refuses_a_file_without_the_aggregate_line(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text("cpu0 1 2 3 4\n")
    with pytest.raises(ValueError, match="no aggregate cpu line"):
        read_cpu(stat)


def test_this_machines_counters_read_and_only_grow():
    a = read_cpu()
    b = read_cpu()
    assert 0 <= a[0] <= a[1] and b[0] >= a[0] and b[1] >= a[1]
    assert 0.0 <= stolen_share(a, b) <= 1.0


def test_stolen_share_of_an_interval():
    assert stolen_share((10, 1000), (40, 1100)) == pytest.approx(0.3)
    assert stolen_share((10, 1000), (10, 1000)) == 0.0


def test_the_monitor_reports_the_mean_over_its_span_and_its_worst_sample():
    # (stolen, total) every time the monitor reads: 0%, then 50%, then 10% per sample
    reads = iter([(0, 0), (0, 100), (50, 200), (60, 300)])
    last = (60, 300)
    mon = StealMonitor(interval=0.01, read=lambda: next(reads, last))
    mon.start()
    deadline = time.monotonic() + 10
    while len(mon.samples) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    mon.stop()
    assert mon.samples[:3] == [0.0, 0.5, 0.1]
    assert mon.summary() == {"mean": pytest.approx(0.2), "max": 0.5}
