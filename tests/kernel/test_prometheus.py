"""The operator's views against real daemons: Debian's Prometheus, started here, scrapes
a real agent on each of three hosts and a real coordinator, and every query of every
panel of the Grafana dashboard (deploy/grafana/grouper-dashboard.json) returns data;
``grouper status --json -`` shows the same cluster.

Everything runs in host h1's network namespace (coordinator, Prometheus, queries) but
the other agents, which Prometheus scrapes across the star's bridge.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse

import grpc
import pytest
import yaml

from grouper.common.cluster_doc import write_cluster
from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg
from tests.kernel.star_cluster import JOBS, PERIOD, agents_on, register_all
from tests.netns import GROUPER, ROOT
from tests.ports import free_port

DASHBOARD = ROOT / "deploy" / "grafana" / "grouper-dashboard.json"
AGENT_METRICS, COORD_METRICS, PROM = 19101, 19100, 19090
# what Grafana puts in place of the dashboard's variables: every host, and a rate window
# of a few scrapes (scrape interval 1 s here)
# urllib from inside h1's namespace (where Prometheus listens): no curl needed
FETCH = "import sys, urllib.request as u; print(u.urlopen(sys.argv[1], timeout=3).read().decode())"
VARIABLES = {"$__rate_interval": "5s", '"$host"': '".*"'}


def cluster(star, tmp_path):  # noqa: ANN001, ANN201
    names = ["h1", "h2", "h3"]
    return write_cluster(
        tmp_path / "cluster.yaml",
        [(n, a, star.nic, 100) for n, a in zip(names, star.addrs, strict=True)],
        cluster="prom",
        scheduling={"period": PERIOD, "min_gap": 0.05},
        agent={"metrics_port": AGENT_METRICS},
        coordinator={"listen": f"127.0.0.1:{free_port()}"},
        metrics={"coordinator": f"127.0.0.1:{COORD_METRICS}"},
    )


def prometheus_config(star, tmp_path):  # noqa: ANN001, ANN201
    agents = [f"127.0.0.1:{AGENT_METRICS}"] + [f"{a}:{AGENT_METRICS}" for a in star.addrs[1:]]
    cfg = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms"},
        "scrape_configs": [
            {
                "job_name": "grouper-coordinator",
                "static_configs": [{"targets": [f"127.0.0.1:{COORD_METRICS}"]}],
            },
            {"job_name": "grouper-agent", "static_configs": [{"targets": agents}]},
        ],  # fmt: skip
    }
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel, variables filled in."""
    out = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for var, value in VARIABLES.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"{panel['title']}: unfilled variable in {expr}"
            out.append((panel["title"], expr))
    return out


def query(star, expr: str) -> list:  # noqa: ANN001
    url = f"http://127.0.0.1:{PROM}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    out = star.run(star.hosts[0], sys.executable, "-c", FETCH, url, check=False)
    if out.returncode != 0:
        return []
    reply = json.loads(out.stdout)
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def end_job(agents, cojob: str) -> None:  # noqa: ANN001
    for src in {f[0] for f in JOBS[cojob]["flows"]}:
        with grpc.insecure_channel(f"unix:{agents[src].registry}") as ch:
            ack = pbg.RegistryStub(ch).JobFinished(pb.JobFinishedReport(cojob_id=cojob, job_id="j"))
        assert ack.ok, ack.error


def wait_all(star, timeout: float) -> list[str]:  # noqa: ANN001
    """Polls every query until each has returned data once; the titles of those left."""
    left = dict.fromkeys(queries())
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        for title, expr in list(left):
            if query(star, expr):
                del left[(title, expr)]
        time.sleep(0.5)
    return [f"{title}: {expr}" for title, expr in left]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs Debian's prometheus")
def test_every_dashboard_panel_has_data_and_status_shows_the_cluster(star, tmp_path):
    path = cluster(star, tmp_path)
    agents = agents_on(star, path, tmp_path)
    h1 = star.hosts[0]
    coord = prom = None
    try:
        for a in agents.values():
            a.metrics_port = AGENT_METRICS
            a.start()
        register_all(agents)
        log = (tmp_path / "coordinator.log").open("a")
        coord = star.popen(h1, *GROUPER, "coordinator", "--config", str(path),
                           cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        prom = star.popen(
            h1, "prometheus", f"--config.file={prometheus_config(star, tmp_path)}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{PROM}",
            stdout=(tmp_path / "prometheus.log").open("a"), stderr=subprocess.STDOUT,
        )  # fmt: skip
        # a job ends (B: its stages are then unscheduled); A keeps its stages in the order
        assert wait_for_data(star, "grouper_coordinator_stage_rank", 20), "no order scraped"
        end_job(agents, "B")
        missing = wait_all(star, 30)
        assert not missing, "panels without data:\n" + "\n".join(missing)
        assert len(query(star, "up == 1")) == 4, "every target scraped"
        check_status(star, path)
    finally:
        for p in (prom, coord):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
        for a in agents.values():  # by pid; the star fixture removes the namespaces
            if a.proc and a.proc.poll() is None:
                a.stop()


def wait_for_data(star, expr: str, timeout: float) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query(star, expr):
            return True
        time.sleep(0.5)
    return False


def check_status(star, path) -> None:  # noqa: ANN001
    """``grouper status --json -``: the same agents, plans, order and flows."""
    out = star.run(star.hosts[0], *GROUPER, "status", "--config", str(path), "--json", "-",
                   "--interval", "1", check=False)  # fmt: skip
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert snap["coordinator"]["up"] and snap["coordinator"]["agents_up"] == 3
    order = snap["coordinator"]["order"]
    assert order and all(s.startswith("A/") for s in order), order
    hosts = {h["host"]: h for h in snap["hosts"]}
    assert all(h["up"] and h["plan_version"] > 0 for h in hosts.values())
    flows = {f["flow_id"]: f for f in hosts["h1"]["flows"]}
    assert any(k.startswith("A/j/h2:") for k in flows), flows
    assert {c["cojob"] for c in snap["cojobs"]} >= {"A"}
    assert any(b["mbps"] is not None for b in hosts["h2"]["bands"])
    assert "A/1" in snap["admission"]["admitted"]
    screen = star.run(star.hosts[0], *GROUPER, "status", "--config", str(path), "--once",
                      "--interval", "0.5", check=False)  # fmt: skip
    assert screen.returncode == 0, screen.stderr
    assert "agents up 3/3" in screen.stdout and "global order: A/" in screen.stdout
