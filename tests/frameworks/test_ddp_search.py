"""A two-trial successive-halving search (Optuna ask-and-tell, synchronous halving) of
2-rank PyTorch DDP jobs over Gloo, one rank per host, every rank started with
``grouper run``; agents on both hosts and a real coordinator. Nobody registers a port.

Checked: while the trials train, each rank's Gloo connections are in the agent's
per-connection maps (``nft -j``) with the band the coordinator planned; the pruned trial
ends as a killed job in the coordinator's view (its log) and the surviving one as
completed; afterwards no rule of either trial is left in any kernel.
"""

from __future__ import annotations

import subprocess
import time

import optuna

from grouper.common.cluster_doc import write_cluster
from grouper.experiments.ddp_runner import DdpRunner, Rank
from grouper.integrations.optuna import SyncHalving
from tests.kernel.test_agent import collect
from tests.netns import GROUPER, ROOT, AgentProc, nft_json
from tests.ports import free_port

STAGES = [30, 30]


def conn_band_elements(ns: str) -> list:
    out = []
    for o in nft_json(ns):
        m = o.get("map")
        if m and m["name"] == "band_conn":
            out += m.get("elem", [])
    return out


def test_ddp_trials_are_classified_and_pruned_trials_end_killed(pair, tmp_path):
    hosts = {"a": (pair.a, pair.addr_a, pair.nic_a), "b": (pair.b, pair.addr_b, pair.nic_b)}
    cfg = write_cluster(
        tmp_path / "cluster.yaml",
        [(h, a, nic, 200) for h, (_, a, nic) in hosts.items()],
        cluster="fw",
        scheduling={"period": 0.5, "min_gap": 0.05},
        failure={"plan_ttl": 5.0, "agent_timeout": 2.0},
        agent={"metrics_port": 0, "discovery_interval": 0.05},
        coordinator={"listen": f"127.0.0.1:{free_port()}"},
        metrics={"coordinator": "127.0.0.1:0"},
    )
    agents = {h: AgentProc(pair, ns, h, cfg, tmp_path).start() for h, (ns, _, _) in hosts.items()}
    coord_log = tmp_path / "coordinator.log"
    coord = subprocess.Popen(
        [*GROUPER, "coordinator", "--config", str(cfg)],
        stdout=coord_log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT,
    )  # fmt: skip

    def spawn(host, argv, env_extra, **kw):
        env = [f"{k}={v}" for k, v in env_extra.items()]
        return pair.popen(hosts[host][0], "env", *env, *argv, cwd=ROOT, **kw)

    runner = DdpRunner(
        "fwsearch",
        spawn,
        lambda n: [Rank("a", pair.addr_a, pair.nic_a), Rank("b", pair.addr_b, pair.nic_b)],
        lambda h: str(agents[h].registry),
        width=128,
        port=29600,
    )
    seen: dict[str, list] = {}
    reported: dict[str, dict] = {}
    real_run_stage = runner.run_stage

    def run_stage(trials, k):
        out = real_run_stage(trials, k)
        if k == 0:  # both trials trained a stage: their connections are known
            seen.update({h: conn_band_elements(hosts[h][0]) for h in hosts})
            for h in hosts:
                reported[h] = {
                    j.job.job_id: [(f.dst_host, f.dst_port) for f in j.job.flows]
                    for j in collect(agents[h]).jobs
                }
        return out

    runner.run_stage = run_stage
    study = optuna.create_study(
        study_name="fwsearch", sampler=optuna.samplers.RandomSampler(seed=1)
    )
    try:
        driver = SyncHalving(study, 2, STAGES)
        best = driver.run(runner)
        assert len(best) == 1 and len(driver.pruned) == 1
        (pruned,) = driver.pruned
        for h in hosts:  # Gloo pairs, the store: every connection classified, no port given
            assert seen[h], f"no classified connection on {h}"
            classes = {str(v) for _, v in seen[h]}
            assert len(seen[h]) >= 2 and all(c.startswith("4752:") for c in classes), classes
            other = "b" if h == "a" else "a"
            # the torch helper declared each rank's ring successor from the process group
            assert reported[h] == {f"trial-{t.number}": [(other, 0)] for t in study.trials}
        deadline = time.monotonic() + 10
        text = ""
        while time.monotonic() < deadline:
            text = coord_log.read_text()
            if "completed after stage 2 of 2" in text and "killed after stage 1" in text:
                break
            time.sleep(0.2)
        assert f"job fwsearch/trial-{pruned} killed after stage 1 of 2" in text, text[-2000:]
        assert f"job fwsearch/trial-{best[0].number} completed after stage 2 of 2" in text
        deadline = time.monotonic() + 5
        while any(conn_band_elements(ns) for ns, _, _ in hosts.values()):
            assert time.monotonic() < deadline, "a finished trial's rules stayed in a kernel"
            time.sleep(0.1)
    finally:
        runner.close()
        coord.terminate()
        coord.wait(10)
        for a in agents.values():
            a.stop()
