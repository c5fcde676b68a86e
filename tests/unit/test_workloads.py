"""Workload files: bad input gets a ConfigError naming the field."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from grouper.common.errors import ConfigError
from grouper.workloads import load_workload, parse_workload
from tests.unit.helpers import with_change

GOOD = {
    "hosts": ["h1", "h2", "h3"],
    "cojobs": [
        {
            "id": "A",
            "stages": [10, 20],
            "jobs": [
                {
                    "id": "p",
                    "arch": "ps",
                    "model_bytes": 1e6,
                    "workers": ["h1", "h2"],
                    "servers": ["h3"],
                },
                {"id": "r", "arch": "ring", "model_bytes": 2e6, "workers": ["h1", "h2", "h3"]},
            ],
        },
    ],
}


def broken(path, value):
    return with_change(GOOD, path, value)


def test_good_workload_parses():
    wl = parse_workload(GOOD)
    assert wl.hosts == ("h1", "h2", "h3")
    assert [j.arch for j in wl.cojobs[0].jobs] == ["ps", "ring"]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            ["cojobs", 0, "jobs", 0, "model_bytes"],
            -5,
            r"cojobs\[0\]\.jobs\[0\]\.model_bytes: must be positive",
        ),
        (
            ["cojobs", 0, "jobs", 0, "workers"],
            ["h1", "h9"],
            r"cojobs\[0\]\.jobs\[0\]\.workers\[1\]: unknown host 'h9'",
        ),
        (
            ["cojobs", 0, "jobs", 1, "workers"],
            ["h1"],
            r"cojobs\[0\]\.jobs\[1\]\.workers: a ring needs at least 2",
        ),
        (["cojobs", 0, "stages"], [], r"cojobs\[0\]\.stages: needs at least 1"),
        (["cojobs", 0, "stages"], [10, 0], r"cojobs\[0\]\.stages\[1\]: must be at least 1"),
        (["cojobs", 0, "stages"], "ten", r"cojobs\[0\]\.stages: expected a list, got str"),
        (
            ["cojobs", 0, "jobs", 0, "model_bytes"],
            "big",
            r"model_bytes: expected a number, got 'big'",
        ),
        (
            ["cojobs", 0, "jobs", 0, "arch"],
            "mesh",
            r"jobs\[0\]\.arch: must be one of ps, ring, flows",
        ),
        (["cojobs", 0, "jobs", 0, "servers"], KeyError, r"jobs\[0\]\.servers: required"),
        (["cojobs", 0, "jobs", 0, "colour"], "red", r"jobs\[0\]\.colour: unknown key"),
        (
            ["cojobs", 0, "jobs", 1, "stages"],
            3,
            r"cojobs\[0\]\.jobs\[1\]\.stages: must be between 1 and 2",
        ),
        (["cojobs"], [], r"^cojobs: needs at least 1"),
        (["hosts"], ["h1", "h1"], r"^hosts: duplicate host names"),
        (["cojobs", 0, "jobs", 1, "id"], "p", r"cojobs\[0\]\.jobs\[1\]\.id: duplicate job id 'p'"),
        (["cojobs", 0, "arrival"], 1e300, r"^cojobs\[0\]\.arrival: 1e\+300 is past the 1e\+09"),
        (["cojobs", 0, "jobs", 0, "done"], 10**6, r"^cojobs\[0\]\.jobs\[0\]\.done: 1000000 iter"),
        (["name"], "../../etc", r"^name: '\.\./\.\./etc' is not a plain name"),
        (["name"], "/tmp/x", r"^name: '/tmp/x' is not a plain name"),
        (["name"], "a" * 81, r"^name: .* is not a plain name"),
    ],
)
def test_bad_workloads_name_the_field(path, value, message):
    with pytest.raises(ConfigError, match=message):
        parse_workload(broken(path, value))


def test_unknown_builtin_lists_known_ones():
    with pytest.raises(ConfigError, match="unknown builtin 'nope'.*fig3"):
        load_workload("builtin:nope")


def test_cli_reports_bad_workload_without_traceback(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(broken(["cojobs", 0, "jobs", 0, "model_bytes"], -1)))
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "order", "--workload", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "cojobs[0].jobs[0].model_bytes: must be positive" in proc.stderr


def test_topology_gives_the_hosts_including_a_partial_last_leaf():
    data = {
        "topology": "leafspine:3,3,8,1,23",
        "cojobs": [
            {
                "id": "A",
                "stages": [1],
                "jobs": [{"id": "j", "arch": "ring", "model_bytes": 1e6, "workers": ["h1", "h23"]}],
            }
        ],
    }
    assert parse_workload(data).hosts[-1] == "h23"
    data["topology"] = "torus:4"
    with pytest.raises(ConfigError, match="^topology: expected bigswitch:P or leafspine"):
        parse_workload(data)


def test_hosts_and_topology_together_must_name_the_same_hosts():
    from grouper.workloads.schema import parse_workload

    base = {
        "name": "t",
        "topology": "leafspine:1,1,3,1",
        "cojobs": [{"id": "c", "arrival": 0, "stages": [2], "jobs": [
            {"id": "j", "arch": "ring", "model_bytes": 1e6, "workers": ["h1", "h2"]}]}],
    }  # fmt: skip
    assert parse_workload(base | {"hosts": ["h1", "h2", "h3"]}).hosts == ("h1", "h2", "h3")
    with pytest.raises(ConfigError, match=r"^hosts: differ from the topology's hosts"):
        parse_workload(base | {"hosts": ["h1", "h2", "h9"]})


def test_results_of_a_workload_stay_inside_the_output_folder(tmp_path):
    """A file's name becomes the default results folder as one plain component."""
    odd = tmp_path / "..evil name;$(x).yaml"
    odd.write_text(yaml.safe_dump(GOOD))  # GOOD has no name
    wl = load_workload(str(odd))
    assert wl.name == "evil_name___x_"
    assert load_workload("builtin:fig3").name == "fig3"
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "simulate", "--workload", str(odd), "--json", "-"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert all(
        p.parts[:2] == ("results", "simulate") for p in written - {odd.relative_to(tmp_path)}
    )


def test_scheduling_and_model_sections():
    data = dict(GOOD, time_unit="s")
    data["scheduling"] = {"period": 0.5, "queues": {"count": 4}, "admission": {"eta": 0}}
    data["model"] = {"ps_mode": "overlap", "contention": "none"}
    wl = parse_workload(data)
    assert (wl.period, wl.ps_mode, wl.contention) == (0.5, "overlap", "none")
    assert wl.queues.queues == 4 and wl.queues.admission.eta == 0
    plain = parse_workload(dict(GOOD, time_unit="s"))
    assert (plain.queues, plain.ps_mode, plain.contention) == (None, "sequential", "wang")
    assert parse_workload(dict(GOOD, time_unit="unit")).contention == "none"


@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ("scheduling", {"period": -1}, r"^scheduling\.period: must be at least 0"),
        ("scheduling", {"period": 1e9}, r"^scheduling\.period: must be at most 3600"),
        ("scheduling", {"queues": {"count": 1}}, r"^scheduling\.queues\.count: must be at least"),
        ("scheduling", {"admission": {"b": 0}}, r"^scheduling\.admission\.b: must be positive"),
        ("scheduling", {"policy": "x"}, r"^scheduling\.policy: unknown key"),
        ("model", {"ps_mode": "async"}, r"^model\.ps_mode: must be one of sequential, overlap"),
        ("model", {"ring_mode": "x"}, r"^model\.ring_mode: must be one of fluid, steps"),
        ("model", {"contention": "tcp"}, r"^model\.contention: must be one of wang, none"),
        ("model", {"local_traffic": "x"}, r"^model\.local_traffic: must be one of drop, ports"),
    ],
)
def test_bad_scheduling_and_model_sections_name_the_field(section, value, message):
    with pytest.raises(ConfigError, match=message):
        parse_workload(dict(GOOD, **{section: value}))


def test_testbed_spread_scales_each_models_stages_and_leaves_the_testbed_alone():
    def iterations(name: str) -> dict:
        return {c.cojob_id: c.stage_iterations for c in load_workload(name).cojobs}

    base, spread = iterations("builtin:testbed"), iterations("builtin:testbed-spread")
    assert base["VGG19-r1"] == (10, 20, 40, 80)
    assert spread["DeepSpeech2-r1"] == (40, 80, 160, 320)
    assert spread["VGG19-r1"] == (5, 10, 20, 40)
    assert spread["AlexNet-r2"] == base["AlexNet-r2"]
