"""The agent's DaemonSet (deploy/kubernetes/grouper-agent.yaml) against the Kubernetes
API schemas that kubernetes-validate ships (offline), strict: an unknown or misplaced
field is an error, on every Kubernetes release from 1.25 to the newest it knows. And
what no schema knows: the container's command is a ``grouper agent`` our parser
accepts, every volume it mounts is declared, and the config it reads is where the
ConfigMap is mounted. No kubelet runs here, so nothing is said about the image, the
host paths or the privileges at run time.
"""

from __future__ import annotations

import copy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from grouper.cli.main import build_parser

MANIFEST = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "grouper-agent.yaml"
VERSIONS = [f"1.{minor}.0" for minor in range(25, 38)]


def _daemonset() -> dict:
    (doc,) = list(yaml.safe_load_all(MANIFEST.read_text()))
    return doc


@pytest.mark.parametrize("version", VERSIONS)
def test_the_daemonset_is_valid_for_each_kubernetes_release(version: str) -> None:
    kubernetes_validate.validate(_daemonset(), version, strict=True)


def test_a_field_the_api_does_not_have_is_refused() -> None:
    """The check can fail: a misspelt field in a copy of the manifest is an error."""
    doc = copy.deepcopy(_daemonset())
    doc["spec"]["template"]["spec"]["hostNetwrok"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(doc, VERSIONS[-1], strict=True)


def test_the_container_runs_an_agent_our_parser_accepts_with_its_config_mounted() -> None:
    pod = _daemonset()["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    argv = container["command"]
    assert argv[:2] == ["grouper", "agent"]
    args = build_parser().parse_args(argv[1:])
    assert args.host == "$(NODE_NAME)"
    assert any(e["name"] == "NODE_NAME" for e in container["env"])
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert set(mounts.values()) <= set(volumes)
    config_dir = str(Path(args.config).parent)
    assert "configMap" in volumes[mounts[config_dir]]
    assert volumes[mounts["/run/grouper"]]["hostPath"]["path"] == "/run/grouper"
