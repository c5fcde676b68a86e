"""Cluster config: path-qualified errors, unknown keys, the sample file, fuzzing."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grouper.common.cluster_config import load_cluster_config, parse_cluster_config
from grouper.common.errors import ConfigError
from tests.unit.helpers import with_change

SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "cluster.sample.yaml"


def sample():
    return yaml.safe_load(SAMPLE.read_text())


def test_sample_config_loads():
    cfg = load_cluster_config(SAMPLE)
    assert [h.name for h in cfg.hosts] == ["gpu01", "gpu02"]
    assert cfg.queues.data_bands == (1, 2, 3, 4, 5, 6)
    assert cfg.control_ports == (7000, 7070)


def test_keep_order_within_is_a_tenth_of_a_percent_unless_set():
    """A config that does not name it keeps orders within 0.001 (docs/results/coordinator.md, "A
    steadier order"); 0 turns it off."""
    doc = sample()
    doc.get("scheduling", {}).pop("keep_order_within", None)
    assert parse_cluster_config(doc).scheduling.keep_order_within == 0.001
    off = with_change(doc, ["scheduling", "keep_order_within"], 0)
    assert parse_cluster_config(off).scheduling.keep_order_within == 0.0


def mutate(path, value):
    return with_change(sample(), path, value)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (["hosts", 1, "nic"], KeyError, r"^hosts\[1\]\.nic: required$"),
        (["hosts", 0, "address"], "10.0.1", r"^hosts\[0\]\.address: expected an IPv4 address"),
        (["hosts", 1, "name"], "gpu01", r"^hosts\[1\]\.name: 'gpu01' is also hosts\[0\]\.name"),
        (["hosts", 0, "link_mbps"], 0, r"^hosts\[0\]\.link_mbps: must be at least 1,"),
        (["hosts", 0, "address6"], "10.0.0.1", r"^hosts\[0\]\.address6: expected an IPv6"),
        (["agent", "discovery_interval"], 0.001, r"^agent\.discovery_interval: must be between"),
        (["agent", "metrics_port"], 7070, r"^agent\.metrics_port: port 7070 is also agent\.port$"),
        (["coordinator", "listen"], "0.0.0.0:9101", r"^coordinator\.listen: port 9101 is also"),
        (["agent", "discovery_interval"], "nan", r"^agent\.discovery_interval: must be finite"),
        (["hosts", 0, "agent"], "nowhere", r"^hosts\[0\]\.agent: expected HOST:PORT"),
        (["queues", "count"], 1, r"^queues\.count: must be at least 2"),
        (["queues", "dscp"], [1, 2], r"^queues\.dscp: needs one code point per band"),
        (["scheduling", "policy"], "best", r"^scheduling\.policy: must be one of"),
        (["scheduling", "period"], -1, r"^scheduling\.period: must be at least 0\.01,"),
        (["admission", "b"], 0, r"^admission\.b: must be positive"),
        (["failure", "plan_ttl"], "soon", r"^failure\.plan_ttl: expected a number"),
        (["agent", "backend"], "ets", r"^agent\.backend: must be one of auto, prio, htb"),
        (["agent", "port"], 70000, r"^agent\.port: must be at most 65535"),
        (["agent", "multiqueue"], "mqprio", r"^agent\.multiqueue: must be one of per-queue"),
        (["hosts", 0, "name"], "gpu 01", r"^hosts\[0\]\.name: 'gpu 01' is not a valid host name"),
        (["hosts", 0, "name"], "../x", r"^hosts\[0\]\.name: '\.\./x' is not a valid host name"),
        (["queues", "scavenger"], 3, r"^queues\.scavenger: must be the lowest band \(7\) or -1"),
        (["queues", "colour"], "red", r"^queues\.colour: unknown key"),
        (["extra"], 1, r"^extra: unknown key"),
        # issue 33: values the kernel, a socket or the coordinator would trip over later
        (["hosts", 0, "nic"], "enp1s0f0np0-extra", r"^hosts\[0\]\.nic: .* interface name"),
        (["hosts", 0, "nic"], "eth0/1", r"^hosts\[0\]\.nic: 'eth0/1' is not an interface"),
        (["hosts", 0, "nic"], "eth 0", r"^hosts\[0\]\.nic: 'eth 0' is not an interface"),
        (["hosts", 0, "nic"], "eth0;reboot", r"^hosts\[0\]\.nic: .* not an interface"),
        (["hosts", 0, "agent"], "'; rm -rf /:7070", r"^hosts\[0\]\.agent: .* not a host name"),
        (["hosts", 0, "agent"], "10.0.0.11:7\u00b970", r"^hosts\[0\]\.agent: expected HOST:PORT"),
        (["hosts", 0, "agent"], "10.0.0.11:\u0667\u0660", r"^hosts\[0\]\.agent: expected HOST:"),
        (["hosts", 0, "agent"], "0.0.0.0:7070", r"^hosts\[0\]\.agent: 0\.0\.0\.0 is the all-zero"),
        (["hosts", 0, "address"], "255.255.255.255", r"^hosts\[0\]\.address: .* broadcast"),
        (["hosts", 0, "address"], "224.0.0.1", r"^hosts\[0\]\.address: .* multicast"),
        (["hosts", 0, "address"], "0.0.0.0", r"^hosts\[0\]\.address: .* all-zero"),
        (["hosts", 0, "address6"], "ff02::1", r"^hosts\[0\]\.address6: .* multicast"),
        (["hosts", 0, "link_mbps"], 25e9, r"^hosts\[0\]\.link_mbps: must be at most 1e\+07"),
        (["hosts", 0, "link_mbps"], 10**400, r"^hosts\[0\]\.link_mbps: too large"),
        (["scheduling", "min_gap"], 2.0, r"^scheduling\.min_gap: 2 s is longer than"),
        (["scheduling", "period"], 1e-6, r"^scheduling\.period: must be at least 0\.01"),
        (["scheduling", "keep_order_within"], 2, r"^scheduling\.keep_order_within: .*at most 1"),
        (["scheduling", "keep_order_within"], -0.1, r"^scheduling\.keep_order_within: .*at least"),
        (["failure", "plan_ttl"], 0.5, r"^failure\.plan_ttl: 0\.5 s is not longer than"),
        (["queues", "reserved"], [0, 3], r"^queues\.reserved: \[0, 3\] must be the top bands"),
        (["queues", "reserved"], [0, 0], r"^queues\.reserved: .* each once"),
    ],
)
def test_bad_configs_name_the_field(path, value, message):
    with pytest.raises(ConfigError, match=message):
        parse_cluster_config(mutate(path, value))


def test_a_file_with_two_hosts_on_one_agent_endpoint_is_refused(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(mutate(["hosts", 1, "agent"], "10.0.0.11:7070")))
    with pytest.raises(
        ConfigError, match=r"^hosts\[1\]\.agent: '10\.0\.0\.11:7070' is also hosts\[0\]"
    ):
        load_cluster_config(path)


def test_check_config_cli_exit_codes(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(mutate(["hosts", 1, "nic"], KeyError)))
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "check-config", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "grouper: error: hosts[1].nic: required"
    ok = subprocess.run(
        [sys.executable, "-m", "grouper.cli", "check-config", str(SAMPLE)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-10, 100000),
    st.floats(allow_nan=True),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda c: st.one_of(
        st.lists(c, max_size=3), st.dictionaries(st.text(max_size=6), c, max_size=3)
    ),
    max_leaves=8,
)


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


ALL_PATHS = [p for p in _paths(sample()) if p]


@settings(max_examples=400, deadline=None)
@given(idx=st.integers(0, len(ALL_PATHS) - 1), value=values)
def test_fuzz_any_field_replaced_gives_a_config_error_or_a_config(idx, value):
    data = copy.deepcopy(sample())
    node = data
    path = ALL_PATHS[idx]
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    try:
        parse_cluster_config(data)
    except ConfigError as exc:
        assert str(exc)


@settings(max_examples=200, deadline=None)
@given(doc=values)
def test_fuzz_arbitrary_documents_never_crash(doc):
    try:
        parse_cluster_config(doc)
    except ConfigError:
        pass


def test_host_of_maps_ipv4_and_ipv6_addresses_to_hosts():
    data = yaml.safe_load(SAMPLE.read_text())
    data["hosts"][1]["address6"] = "FD00:1:0::12"
    cfg = parse_cluster_config(data)
    assert cfg.host_of["10.0.1.12"] == "gpu02"
    assert cfg.host_of["fd00:1::12"] == "gpu02", "normalized like the kernel prints it"
    assert cfg.host_of["fd00:1::11"] == "gpu01"


def test_tls_files_must_be_readable_and_the_key_private(tmp_path):
    data = yaml.safe_load(SAMPLE.read_text())
    for name in ("ca.pem", "host.pem", "host.key"):
        (tmp_path / name).write_text("x")
    data["tls"] = {k: str(tmp_path / f) for k, f in
                   (("ca", "ca.pem"), ("cert", "host.pem"), ("key", "host.key"))}  # fmt: skip
    path = tmp_path / "cluster.yaml"
    (tmp_path / "host.key").chmod(0o600)
    path.write_text(yaml.safe_dump(data))
    assert load_cluster_config(path).tls is not None
    (tmp_path / "host.key").chmod(0o644)
    with pytest.raises(ConfigError, match=r"^tls\.key: .* is readable by every user"):
        load_cluster_config(path)
    (tmp_path / "ca.pem").unlink()
    with pytest.raises(ConfigError, match=r"^tls\.ca: cannot read"):
        load_cluster_config(path)
