"""Run Wang et al.'s own simulator (github.com/HKBU-HPML/dl-scheduling, ``online/``,
Python 2) on a directory of job files, for ``scripts/wang_authors_table.py``.

Their ``job_master.py``, ``job.py`` and ``cluster.py`` are copied unchanged from a git
directory (the ``fetch`` tool's mirror) into a temporary folder, except:

* the module-level tail of ``job_master.py`` (which loads their ``microsoft-160`` set)
  is cut and a driver appended: it loads our set, runs ``schedule()`` with their own
  argument strings (SRSF(1) ``ssf-lwf1-srsf-0-false``, SRSF(2) ``ssf-lwf1-srsf-1-false``,
  Ada-SRSF ``ssf-lwf1-srsf-1-true``, the ``ssf-lwf1`` rows of their ``run_schedules.sh``)
  and prints one JSON line: average JCT and GPU utilisation;
* ``read_only=True`` replaces the body of ``dag_task.get_rest_size`` by one that
  computes the remaining size without adding to ``transferred_size`` (the artefact off);
* ``numpy`` and ``yaml`` are not needed: two small stand-in modules give the two calls
  the simulation path makes (``np.mean``; ``yaml.safe_load``, our files being JSON).

Needs a Python 2.7 interpreter (``PYTHON2``, default ``python2``). The simulation's
log is discarded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

RULES = {
    "srsf:1": ("ssf", "lwf1", "srsf", 0, False),
    "srsf:2": ("ssf", "lwf1", "srsf", 1, False),
    "ada-srsf": ("ssf", "lwf1", "srsf", 1, True),
}
SHIM_NUMPY = "def mean(xs):\n    xs = list(xs)\n    return float(sum(xs)) / len(xs)\n"
SHIM_YAML = "import json\n\ndef safe_load(f):\n    return json.load(f)\n"
READ_ONLY = (
    "    def get_rest_size(self, time):\n"
    "        return self.model_size - (self.transferred_size"
    " + (time - self.last_change_time) * self.speed)\n"
)
DRIVER = """
import sys, json
_out = sys.stdout
class _Null(object):
    def write(self, s):
        pass
sys.stdout = _Null()
jobS = job_scheduler("set")
jobS.schedule(%r, %r, %r, %d, %s)
jct = []
for lst in jobS.job_set:
    jct.extend([j.finish_time for j in lst])
gpus = jobS.clust.gpu_list
util = sum(g.active_time for g in gpus) / float(len(gpus) * jobS.total_time)
_out.write(json.dumps({"avg_jct": sum(jct) / 1000.0 / len(jct), "util": util,
                       "slots": jobS.total_time}) + "\\n")
"""


def _source(git_dir: str, name: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"HEAD:online/{name}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def prepare(git_dir: str, read_only: bool, where: Path) -> None:
    job = _source(git_dir, "job.py")
    if read_only:
        start = job.index("    def get_rest_size(self, time):")
        end = job.index("class dag_job:")
        job = job[:start] + READ_ONLY + "\n" + job[end:]
    (where / "job.py").write_text(job)
    (where / "cluster.py").write_text(_source(git_dir, "cluster.py"))
    master = _source(git_dir, "job_master.py")
    (where / "job_master.py").write_text(master[: master.index("## random job set for test")])
    (where / "numpy.py").write_text(SHIM_NUMPY)
    (where / "yaml.py").write_text(SHIM_YAML)


def run_authors(git_dir: str, job_dir: str, scheduler: str, read_only: bool) -> dict:
    """One run of their simulator: ``{"avg_jct": s, "util": fraction, "slots": n}``."""
    with tempfile.TemporaryDirectory(prefix="authors-") as tmp:
        where = Path(tmp)
        prepare(git_dir, read_only, where)
        (where / "job_configs").mkdir()
        shutil.copytree(job_dir, where / "job_configs" / "set")
        rule = RULES[scheduler]
        driver = "from job_master import *\n" + DRIVER % rule
        (where / "driver.py").write_text(driver)
        python2 = os.environ.get("PYTHON2", "python2")
        done = subprocess.run(
            [python2, "driver.py"], cwd=where, check=True, capture_output=True, text=True
        )
        return json.loads(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    import sys

    print(run_authors(sys.argv[1], sys.argv[2], sys.argv[3], len(sys.argv) > 4))
