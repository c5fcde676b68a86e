"""The generated reference (docs/reference/) is complete: every cluster-config and
workload key the parsers accept, every ``grouper`` subcommand and flag, and every
Prometheus metric has a description, and no description names something that is gone.
Adding a key, flag or metric without one fails here (and so ``make test``)."""

from __future__ import annotations

import argparse

import pytest

from grouper.cli.main import build_parser
from grouper.cli.reference import cli, grpc, metrics, pages, schema
from grouper.common import config_keys
from grouper.workloads import keys as workload_keys


def _undescribed(accepted: set[str], docs: dict, delegated: dict) -> tuple[list, list]:
    own = {k for k in accepted if not any(k.startswith(f"{p}.") for p in delegated)}
    missing = sorted(k for k in own if not (k in docs and docs[k].meaning.strip()))
    stale = sorted(set(docs) - own)
    return missing, stale


def test_every_cluster_key_is_described():
    missing, stale = _undescribed(schema.cluster_trace().keys(), config_keys.KEYS, {})
    assert missing == [] and stale == []


def test_every_workload_key_is_described():
    t = schema.workload_trace()
    missing, stale = _undescribed(t.keys(), workload_keys.KEYS, workload_keys.SAME_AS)
    assert missing == [] and stale == []
    cluster = schema.cluster_trace().keys()
    for key, same in workload_keys.SAME_AS.items():  # read by the cluster config's readers
        inner = {k.removeprefix(f"{key}.") for k in t.keys() if k.startswith(f"{key}.")}
        assert inner and inner <= {k.removeprefix(f"{same}.") for k in cluster}


def test_the_trace_sees_types_defaults_and_bounds():
    f = schema.cluster_trace().fields
    assert f["admission.eta"].kind == "number" and f["admission.eta"].value == 3e-10
    assert f["admission.eta"].bounds == {"minimum": 0} and not f["admission.eta"].given
    assert f["hosts[].nic"].required and f["scheduling.period"].bounds["minimum"] == 0.01
    assert schema.kind_of(f["queues.reserved"], config_keys.KEYS["queues.reserved"]) == (
        "list of integers"
    )


def test_every_subcommand_and_flag_is_described():
    missing = []
    for words, summary, parser in cli.commands(build_parser()):
        if len(words) > 1 and not summary.strip():
            missing.append(" ".join(words))
        for a in cli.arguments(parser):
            if not (a.help or "").strip():
                missing.append(f"{' '.join(words)} {a.option_strings or a.dest}")
    assert missing == []


def test_the_cli_walk_sees_nested_subcommands():
    words = {w for w, _, _ in cli.commands(build_parser())}
    assert ("grouper", "bench", "pda") in words and ("grouper", "check-config") in words
    assert not any(isinstance(a, argparse._HelpAction) for a in cli.arguments(build_parser()))


def test_every_metric_is_described():
    found = metrics.every_metric()
    assert found["agent"] and found["coordinator"]
    names = [m.name for ms in found.values() for m in ms]
    assert len(names) == len(set(names)) and "grouper_agent_band_drops" in names
    assert [m.name for ms in found.values() for m in ms if not m.help.strip()] == []
    for daemon, ms in found.items():  # every label's values described beside the metrics
        labels = metrics.LABELS[daemon]
        assert {x for m in ms for x in m.labels} == {x for x, text in labels.items() if text}


def test_the_grpc_reference_keeps_the_comments():
    (f,) = grpc.descriptor_set().file
    notes = grpc.comments(f)
    assert {s.name for s in f.service} == {"Registry", "Agent"}
    assert any("cgroup" in text for text in notes.values())


@pytest.mark.parametrize("name", sorted(pages()))
def test_every_page_renders(name):
    text = pages()[name]()
    assert text.startswith("# ") and len(text.splitlines()) > 20
