"""What a user does with the Slurm layer's site, and what the tests read back: the batch
script of a step whose ranks run under ``grouper run``, ``sbatch`` as the user, waiting
with the jobs' outputs in the failure, and the agents' and coordinator's views of the jobs.

A rank's agent socket is named by its node (``$SLURMD_NODENAME``) because both nodes
share this machine's filesystem; on a cluster every node's agent listens at the default
path and the srun line needs no ``--socket``.
"""

from __future__ import annotations

import os
import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.kernel.agent_calls import collect
from tests.kernel.star_cluster import metrics_address
from tests.netns import TIME_SCALE, nft_json
from tests.slurm.conftest import Site
from tests.users import User

STAGES = (6, 12)


def home(site: Site, user: User) -> Path:
    """A folder of the user's own on the shared filesystem: scripts, job outputs."""
    path = site.work / user.name
    path.mkdir(exist_ok=True)
    os.chown(path, user.uid, user.gid)
    return path


@dataclass(frozen=True)
class Step:
    """One srun step of a user's batch script: a 2-rank ring of ``ring.py`` under
    ``grouper run``. ``job`` and ``port`` are shell words (an array task's
    ``trial-$SLURM_ARRAY_TASK_ID``); ``before`` runs in each rank's shell first;
    ``sbatch`` holds more ``#SBATCH`` options; ``out`` the output file's pattern."""

    cojob: str
    port: int | str
    nbytes: int
    iterations: tuple[int, ...] = STAGES
    job: str = "trial-0"
    before: str = ""
    sbatch: str = ""
    out: str = "%j"

    def rank(self, site: Site, shared: Path) -> str:
        venv = shared / "venv" / "bin"
        addrs = " ".join(site.addrs[n] for n in sorted(site.addrs))
        stages = ",".join(map(str, self.iterations))
        return (
            f"{self.before}exec {venv}/grouper run "
            f"--socket {site.work}/$SLURMD_NODENAME-registry.sock --cojob {self.cojob} "
            f"--job {self.job} --stages {stages} --model-bytes {self.nbytes} -- "
            f"{venv}/python {shared}/ring.py {self.port} {self.nbytes} "
            f"{sum(self.iterations)} {addrs}"
        )


def step_script(site: Site, shared: Path, user: User, step: Step) -> Path:
    """The batch script a user writes: one srun step, every rank under grouper run."""
    path = home(site, user) / f"{step.cojob}.sbatch"
    path.write_text(
        "#!/bin/sh\n"
        f"#SBATCH -N2 --ntasks-per-node=1 -J {step.cojob} {step.sbatch}"
        f"-o {path.parent}/{step.cojob}-{step.out}.out\n"
        f"srun sh -c '{step.rank(site, shared)}'\n"
    )
    path.chmod(0o755)
    return path


def output(site: Site, user: User, cojob: str, job: int | str) -> str:
    """What a job (``job`` as its output file names it) printed."""
    return (home(site, user) / f"{cojob}-{job}.out").read_text()


def submit(site: Site, user: User, script: Path) -> int:
    """``sbatch`` as ``user``, from the head node, in a folder the user may read."""
    out = site.slurm.as_user(user.argv, "sbatch", "--parsable", str(script), cwd=script.parent)
    return int(out.strip().split(";")[0])


def wait_for(cond, timeout: float, what, site: Site | None = None) -> None:  # noqa: ANN001
    """Poll ``cond``; on a timeout say ``what`` (a text, or a function giving it) and
    what the jobs printed (with ``site``)."""
    deadline = time.monotonic() + timeout * TIME_SCALE
    while not cond():
        if time.monotonic() > deadline:
            what = what() if callable(what) else what
            said = site.outputs() if site is not None else ""
            raise AssertionError(f"timed out after {timeout} s waiting for {what}{said}")
        time.sleep(0.2)


def coordinator_metrics(site: Site) -> str:
    address = metrics_address(site.config)
    return urllib.request.urlopen(f"http://{address}/metrics", timeout=3).read().decode()


def stage_ranks(text: str) -> dict[str, float]:
    pattern = r'^grouper_coordinator_stage_rank\{stage="([^"]+)"\} (\S+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.M)}


def jobs_ended(text: str, how: str) -> float:
    """The coordinator's count of jobs ended ``how`` (completed, killed)."""
    m = re.search(rf'^grouper_coordinator_jobs_ended_total\{{how="{how}"\}} (\S+)$', text, re.M)
    return float(m[1]) if m else 0.0


def registered(site: Site) -> dict[tuple[str, str, str], int]:
    """(node, cojob, job) -> the uid the agent says registered it."""
    return {
        (n, j.job.cojob_id, j.job.job_id): j.owner_uid
        for n, a in site.agents.items()
        for j in collect(a).jobs
    }


def running_jobs(site: Site, cojob: str) -> list[tuple[str, str]]:
    """(node, job) of ``cojob``'s jobs the agents still hold as running."""
    return [(n, j.job.job_id) for n, a in site.agents.items() for j in collect(a).jobs
            if j.job.cojob_id == cojob and not j.finished]  # fmt: skip


def ring_elements(site: Site, port: int) -> dict[str, int]:
    """node -> how many of the agent's per-connection map elements are the ring's
    (its port at either end)."""
    out = {}
    for n, ns in zip(sorted(site.addrs), site.star.hosts[1:], strict=True):
        count = 0
        for o in nft_json(ns):
            m = o.get("map")
            if m and m["name"] == "band_conn":
                count += sum(1 for key, _ in m.get("elem", []) if port in key["concat"][2:])
        out[n] = count
    return out
