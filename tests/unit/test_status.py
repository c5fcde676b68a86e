"""``grouper status`` without daemons: the snapshot and screen from two rounds of
reports, and its bad input. (tests/kernel/test_prometheus.py runs it against real agents
and a real coordinator.)"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from grouper.cli import status
from grouper.cli.main import main
from grouper.cli.status import local_address
from grouper.cli.status_view import render, snapshot, watch
from grouper.common.cluster_config import parse_cluster_config

CFG = parse_cluster_config(
    {
        "cluster": "c",
        "hosts": [
            {"name": "h1", "address": "10.0.0.1", "nic": "eth0"},
            {"name": "h2", "address": "10.0.0.2", "nic": "eth0"},
        ],
    }
)


def report(bytes1: int, drops: int, flows: list) -> dict:
    return {
        "plan_version": 7,
        "priorities_active": True,
        "backend": "prio",
        "bands": {1: {"bytes": bytes1, "packets": 10, "drops": drops}},
        "flows": flows,
        "jobs": [
            {"cojob": "A", "job": "j", "stages": [4, 8], "stages_finished": 1}
            | {"iterations_done": 5, "finished": False},
            {"cojob": "B", "job": "k", "stages": [2], "stages_finished": 0}
            | {"iterations_done": 0, "finished": False},
        ],
    }


FLOWS = [
    {"flow_id": "A/j/h2:5101", "band": 1, "dscp": 48},
    {"flow_id": "B/k/h2:5201", "band": 7, "dscp": 8},  # the scavenger band: not admitted
]
METRICS = {
    "agents_up": [({}, 1.0)],
    "agent_up": [({"host": "h1"}, 1.0), ({"host": "h2"}, 0.0)],
    "stages": [({}, 2.0)],
    "stage_rank": [({"stage": "B/1"}, 2.0), ({"stage": "A/2"}, 1.0)],
    "cycles_total": [({"trigger": "period"}, 9.0)],
    "plans_pushed_total": [({"form": "delta"}, 3.0)],
}


def raw(at: float, bytes1: int, drops: int) -> dict:
    return {
        "at": at,
        "hosts": {
            "h1": {"up": True, "report": report(bytes1, drops, FLOWS)},
            "h2": {"up": False, "error": "UNAVAILABLE"},
        },
        "coordinator": {"up": True, "address": "127.0.0.1:9100", "samples": METRICS},
    }


def test_snapshot_rates_order_flows_and_admission():
    snap = snapshot(CFG, raw(10.0, 1000, 1), raw(12.0, 251000, 5))
    band = snap["hosts"][0]["bands"][0]
    assert band["mbps"] == pytest.approx(250000 * 8 / 2 / 1e6)
    assert band["drops_per_s"] == pytest.approx(2.0)
    assert snap["hosts"][1] == {"host": "h2", "up": False, "error": "UNAVAILABLE"}
    assert snap["coordinator"]["order"] == ["A/2", "B/1"]
    assert snap["coordinator"]["agent_up"] == {"h1": True, "h2": False}
    flows = {f["flow_id"]: f for f in snap["hosts"][0]["flows"]}
    assert flows["A/j/h2:5101"]["stage"] == "A/2" and flows["A/j/h2:5101"]["admitted"]
    assert flows["B/k/h2:5201"]["stage"] == "B/1" and not flows["B/k/h2:5201"]["admitted"]
    assert snap["admission"] == {"scavenger_band": 7, "admitted": ["A/2"], "waiting": ["B/1"]}
    assert [c["cojob"] for c in snap["cojobs"]] == ["A", "B"]


def test_counters_that_went_back_give_no_rate():
    """An agent restarted between the two reports: its counters restarted too."""
    snap = snapshot(CFG, raw(10.0, 5000, 5), raw(12.0, 100, 0))
    assert snap["hosts"][0]["bands"][0]["mbps"] is None


def test_screen_shows_each_part():
    text = render(snapshot(CFG, raw(10.0, 1000, 1), raw(12.0, 251000, 5)))
    assert "global order: A/2 > B/1" in text
    assert "down: UNAVAILABLE" in text
    assert "B1 Mbit/s" in text and "1.0 (2 drops/s)" in text
    assert "waiting (band 7): B/1" in text
    rows = [ln.split() for ln in text.splitlines()]
    assert ["A", "j", "h1", "A/2", "1", "1/2", "5"] in rows
    assert ["B", "k", "h1", "B/1", "2", "0/1", "0", "waiting"] in rows


def test_once_prints_names_bands_and_versions_as_plain_unwrapped_text(
    monkeypatch, tmp_path, capsys
):
    """``--once`` into a pipe (pytest's capture is not a terminal): no ANSI codes, no row
    wrapped however narrow COLUMNS is, no trailing blanks."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "cluster: c\nhosts:\n"
        + "".join(f"  - {{name: h{i}, address: 10.0.0.{i}, nic: eth0}}\n" for i in (1, 2))
    )
    rounds = iter([raw(10.0, 1000, 1), raw(12.0, 251000, 5)])
    monkeypatch.setattr(status, "gather", lambda *_: next(rounds))
    monkeypatch.setenv("COLUMNS", "40")
    assert main(["status", "--config", str(cfg), "--once", "--interval", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and all(ln == ln.rstrip() for ln in out.splitlines())
    rows = [ln.split() for ln in out.splitlines()]
    assert [
        "HOST",
        "AGENT",
        "PLAN",
        "PRIORITIES",
        "BACKEND",
        "B0",
        "Mbit/s",
        "B1",
        "Mbit/s",
    ] in rows
    assert ["h1", "up", "7", "yes", "prio", "-", "1.0", "(2", "drops/s)"] in rows
    assert ["h2", "down:", "UNAVAILABLE"] in rows
    assert ["h1", "B/k/h2:5201", "7", "8", "B/1", "waiting"] in rows
    assert "agents up 1/2" in out and "global order: A/2 > B/1" in out


def test_cells_are_text_not_markup_and_extra_flows_are_counted():
    flows = [{"flow_id": f"A/j/h2:{5000 + i}", "band": 1, "dscp": 48} for i in range(20)]
    cur = raw(12.0, 2000, 1)
    cur["hosts"]["h1"]["report"]["flows"] = flows
    cur["hosts"]["h2"]["error"] = "[bold]refused[/bold]"
    text = render(snapshot(CFG, raw(10.0, 1000, 1), cur))
    assert "down: [bold]refused[/bold]" in text
    assert "+4 more: --json" in text and "A/j/h2:5015" in text and "A/j/h2:5016" not in text


def test_watch_redraws_each_snapshot_in_place():
    snap = snapshot(CFG, raw(10.0, 1000, 1), raw(12.0, 251000, 5))
    out = io.StringIO()
    watch([snap, snap], Console(file=out, force_terminal=True, width=120))
    text = out.getvalue()
    # drawn, then erased and drawn again (Live repaints once more on exit)
    assert text.count("grouper status: cluster c") >= 2 and "\x1b[1A\x1b[2K" in text
    assert "h1" in text and "B1 Mbit/s" in text


def test_coordinator_unreachable_is_said_not_fatal():
    cur = raw(12.0, 2000, 1) | {"coordinator": {"up": False, "error": "refused"}}
    text = render(snapshot(CFG, raw(10.0, 1000, 1), cur))
    assert "coordinator : not reachable (refused)" in text


def test_listening_addresses_as_a_local_client_reaches_them():
    assert local_address("0.0.0.0:9100") == "127.0.0.1:9100"
    assert local_address("10.0.0.5:9100") == "10.0.0.5:9100"
    assert local_address("0.0.0.0:0") == ""


@pytest.mark.parametrize(
    "extra, field",
    [(["--interval", "0"], "--interval"), (["--coordinator", "nohost"], "--coordinator")],
)
def test_bad_input_exits_2_naming_the_field(extra, field, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["status", "--config", "docs/cluster.sample.yaml", *extra])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and field in err


def test_a_config_that_does_not_parse_exits_2(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("cluster: c\nhosts: []\n")
    assert main(["status", "--config", str(cfg), "--once"]) == 2
    assert capsys.readouterr().err.startswith("grouper: error: hosts")
