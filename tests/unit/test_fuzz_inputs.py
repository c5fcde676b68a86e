"""Random damage to valid configs and workloads: every outcome is either accepted or
one ConfigError line of bounded length; never another exception (a traceback)."""

from __future__ import annotations

import copy
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.cluster_config import parse_cluster_config
from grouper.common.errors import ConfigError
from grouper.common.yamlfile import parse_yaml
from grouper.workloads.schema import parse_workload

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "docs" / "cluster.sample.yaml").read_text())
WORKLOAD_TEXT = (resources.files("workloads") / "builtin" / "small.yaml").read_text()
WORKLOAD = yaml.safe_load(WORKLOAD_TEXT)
POOL = [None, -1, 0, 1, 0.5, float("nan"), float("inf"), -float("inf"), 1e308, 2**70,
        -(2**70), "", "x" * 300, "1e999", "nan", "h1", True, [], {}, [None], {"a": 1}]  # fmt: skip


def paths(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield path + (k,)
            yield from paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield path + (i,)
            yield from paths(v, path + (i,))


def damage(doc, rnd):
    d = copy.deepcopy(doc)
    for _ in range(rnd.randint(1, 3)):
        where = list(paths(d))
        if not where:
            break
        p = rnd.choice(where)
        parent = d
        for k in p[:-1]:
            parent = parent[k]
        kind = rnd.random()
        if kind < 0.75:
            parent[p[-1]] = copy.deepcopy(rnd.choice(POOL))
        elif isinstance(parent, dict):
            del parent[p[-1]]
        else:
            parent.append(copy.deepcopy(rnd.choice(parent)))
    return d


def check(fn, data) -> None:
    try:
        fn(data)
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and len(text) <= 330, text


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_damaged_cluster_configs_fail_cleanly(rnd):
    check(parse_cluster_config, damage(CONFIG, rnd))


@settings(max_examples=300, deadline=None)
@given(st.randoms(use_true_random=False))
def test_damaged_workloads_fail_cleanly(rnd):
    check(parse_workload, damage(WORKLOAD, rnd))


@settings(max_examples=200, deadline=None)
@given(st.randoms(use_true_random=False))
def test_damaged_yaml_text_fails_cleanly(rnd):
    text = list(WORKLOAD_TEXT)
    for _ in range(rnd.randint(1, 8)):
        i = rnd.randrange(len(text))
        text[i] = rnd.choice(["", ":", "-", "[", "{", "&a ", "*a", "\t", "\x00", "'", "\n  "])
    check(lambda t: parse_workload(parse_yaml(t, "workload")), "".join(text))


def test_the_cli_answers_damage_with_exit_2_and_one_line(tmp_path):
    import random

    rnd = random.Random(7)
    for i in range(6):
        path = tmp_path / f"w{i}.yaml"
        path.write_text(yaml.safe_dump(damage(WORKLOAD, rnd)))
        r = subprocess.run(
            [sys.executable, "-m", "grouper.cli", "order", "--workload", str(path), "--json",
             str(tmp_path / "out.json")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert r.returncode in (0, 2), r.stderr[-500:]
        if r.returncode == 2:
            assert r.stderr.count("\n") == 1 and r.stderr.startswith("grouper: error: ")
        assert "Traceback" not in r.stderr
