"""Hostile YAML input: every case is one error line naming the problem, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common import yamlfile
from grouper.common.errors import ConfigError
from grouper.common.yamlfile import parse_yaml

SAMPLE = "cluster: a\nhosts:\n  - {name: h1, address: 10.0.0.1, nic: eth0}\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("cluster: a\ncluster: b\n", r"^config: line 2: duplicate key 'cluster'$"),
        ("a: &x [1, 2]\nb: *x\n", r"^config: line 2: anchors and aliases are not supported$"),
        ("a: !!python/object:os.system x\n", r"^config: line 1: not valid YAML: could not"),
        ("a: [1, 2\n", r"^config: line 2: not valid YAML: "),
        ("[" * 20000 + "]" * 20000, r"^config: line 1: nested deeper than 64 levels$"),
    ],
)
@pytest.mark.parametrize("parser", ["default", "pure-python"])
def test_bad_yaml_is_one_clear_line(text, message, parser, monkeypatch):
    """The same message from libyaml (when PyYAML has it) and from the Python parser."""
    if parser == "pure-python":
        monkeypatch.setattr(yamlfile, "_Loader", yamlfile._PyLoader)
    with pytest.raises(ConfigError, match=message) as err:
        yamlfile.parse_yaml(text, "config")
    assert "\n" not in str(err.value)


def test_files_that_are_not_small_utf8_regular_files_are_refused(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="a directory"):
        yamlfile.read_text(tmp_path, "config")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        yamlfile.read_text(fifo, "config")  # and does not block
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("cluster: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"^config: not UTF-8 text \(byte 12\)$"):
        yamlfile.read_text(latin, "config")
    big = tmp_path / "big.yaml"
    big.write_text(SAMPLE)
    monkeypatch.setattr(yamlfile, "MAX_BYTES", 16)
    with pytest.raises(ConfigError, match="larger than"):
        yamlfile.read_text(big, "config")


@pytest.mark.parametrize("what", ["check-config", "order"])
def test_the_cli_exits_2_with_one_line(tmp_path, what):
    bad = tmp_path / "dup.yaml"
    bad.write_text("cluster: a\ncluster: b\n" if what == "check-config" else "name: x\nname: y\n")
    args = [str(bad)] if what == "check-config" else ["--workload", str(bad)]
    r = subprocess.run(
        [sys.executable, "-m", "grouper.cli", what, *args], capture_output=True, text=True
    )
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "duplicate key" in r.stderr, r.stderr


JSONABLE = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False, allow_infinity=False, width=32) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=6), JSONABLE, max_size=5))
def test_json_and_yaml_texts_of_a_document_read_the_same(doc):
    """JSON goes through the C JSON parser, YAML through PyYAML: same data either way."""
    import json

    import yaml

    assert parse_yaml(json.dumps(doc), "config") == doc
    assert parse_yaml(yaml.safe_dump(doc), "config") == doc


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"a": 1, "a": 2}', r"^config: duplicate key 'a'$"),
        ('{"a": [' * 40 + "]}" * 40, r"^config: line 1: nested deeper than 64 levels$"),
    ],
)
def test_json_documents_get_the_same_checks(text, message):
    with pytest.raises(ConfigError, match=message):
        parse_yaml(text, "config")


def test_json_nan_is_read_as_yaml_would():
    assert parse_yaml('{"a": NaN}', "config") == {"a": "NaN"}
