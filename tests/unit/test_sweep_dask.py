"""``simulate sweep --dask ADDRESS``: the points run on a real Dask cluster (a local
one, started here: a scheduler and two worker processes) and give the same results as
on this machine."""

from __future__ import annotations

import json
import subprocess
import sys

import dask
from distributed import LocalCluster

ARGS = ["simulate", "sweep", "--what", "period", "--workload", "builtin:fig3",
        "--values", "0,0.5,1,2", "--policies", "grouper", "--json", "-"]  # fmt: skip


def sweep(tmp_path, *extra: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", *ARGS, "--out", str(tmp_path), *extra],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_a_sweep_on_a_dask_cluster_gives_the_local_results(tmp_path):
    scratch = {"temporary-directory": str(tmp_path)}  # not dask-scratch-space in /tmp
    with (
        dask.config.set(scratch),
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
    ):
        remote = sweep(tmp_path / "dask", "--dask", cluster.scheduler_address)
        workers = set(cluster.workers[i].worker_address for i in cluster.workers)
    local = sweep(tmp_path / "local", "--jobs", "1")
    assert remote["points"] == local["points"]
    assert remote["ran_on"] and set(remote["ran_on"]) <= workers
    assert local["ran_on"] == ["local"]


def test_an_unreachable_scheduler_is_a_one_line_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "grouper.cli", *ARGS, "--out", str(tmp_path),
         "--dask", "tcp://127.0.0.1:9"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    err = proc.stderr.strip()
    assert err.count("\\n") == 0 and "--dask" in err, err
