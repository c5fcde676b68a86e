"""What every key of a workload file means: the text of the workload-format reference
(docs/reference/workload-format.md, generated).

As for the cluster config (:mod:`grouper.common.config_keys`), types, defaults and
simple bounds come from :func:`grouper.workloads.schema.parse_workload` itself, traced
while it reads the documents below; ``tests/unit/test_reference_complete.py`` fails
when a key it accepts has no entry here. ``scheduling.queues`` and
``scheduling.admission`` are read by the cluster config's readers: their keys are
documented once, there (:data:`SAME_AS`).
"""

from __future__ import annotations

from grouper.common.config_keys import Doc
from grouper.common.limits import MAX_ARRIVAL, MAX_FLOWS, MAX_STAGES

_RING = {"id": "j1", "arch": "ring", "model_bytes": 1e6, "workers": ["h1", "h2"]}
_PS = {"id": "j2", "arch": "ps", "model_bytes": 1e6, "workers": ["h1"], "servers": ["h2"]}
_FLOWS = {"id": "j3", "arch": "flows", "flows": [{"src": "h1", "dst": "h2", "bytes": 1e6}]}
# first the documents that leave optional keys out (their defaults), then the rest
SAMPLES = (
    {"hosts": ["h1", "h2"], "cojobs": [{"id": "c", "stages": [10], "jobs": [_RING]}]},
    {
        "topology": "bigswitch:2",
        "scheduling": {"queues": {}},
        "cojobs": [{"id": "c", "stages": [10, 20], "jobs": [_PS, _FLOWS]}],
    },
    {
        "hosts": ["h1", "h2"],
        "capacity": 1.25e9,
        "cojobs": [{"id": "c", "stages": [10, 20], "jobs": [{**_RING, "stages": 1}]}],
    },
)

# a key here is read by the cluster config's reader of the key it names
SAME_AS = {"scheduling.queues": "queues", "scheduling.admission": "admission"}

KEYS: dict[str, Doc] = {
    "name": Doc("The workload's name: the folder its results go to.", default="the file's stem"),
    "description": Doc("Free text for the reader; not used.", kind="string", default="none"),
    "hosts": Doc(
        "The hosts, by name, each one ingress and one egress port (big-switch model).",
        bounds="names unique; required unless topology is given, and then the same hosts",
        default="the topology's hosts",
    ),
    "topology": Doc(
        "A fabric instead of a list of hosts: `bigswitch:N` or `leafspine:L,S,H,GBPS` "
        "(leaves, spines, hosts per leaf, link Gbit/s).",
        kind="string",
        default="none (one big switch)",
    ),
    "capacity": Doc(
        "Bytes per time unit of every host port.",
        bounds="with time_unit s: 1e3 to 1e14 bytes/s; else 1e-6 to 1e15",
    ),
    "time_unit": Doc(
        "The unit of every time in the file: `s` for seconds; textbook examples use `unit`."
    ),
    "scheduling": Doc("What a simulation of this workload schedules with."),
    "scheduling.period": Doc(
        "The default `--period` in seconds: time between two plans (0: plan at every event).",
        bounds="0 or at least 1e-3",
    ),
    "scheduling.queues": Doc("The priority queues, as the cluster config's `queues`."),
    "scheduling.admission": Doc("AdaDUAL's contention model, as the cluster config's `admission`."),
    "model": Doc("How the simulator moves bytes."),
    "model.ps_mode": Doc(
        "A PS iteration: `sequential` pushes then pulls; `overlap` does both at once."
    ),
    "model.ring_mode": Doc(
        "A ring iteration: `fluid` moves each hop's bytes as one flow; `steps` moves "
        "2(W-1) chunks per hop with a barrier after each (what `grouper emulate` predicts "
        "with)."
    ),
    "model.contention": Doc(
        "`wang`: Eq. 5's penalty between jobs sharing a queue; `none`: ideal fluid sharing.",
        default="wang with time_unit s, none otherwise",
    ),
    "model.local_traffic": Doc(
        "A host's traffic to itself: `drop` keeps it off the network; `ports` sends it "
        "through the host's own uplink and downlink."
    ),
    "model.barrier": Doc(
        "Jobs of a cojob wait for each other at every stage's end (successive halving); "
        "false: each job moves on by itself."
    ),
    "model.goodput": Doc(
        "Share of the link rate payload moves at (`grouper calibrate` measures it).",
        bounds="at most 1",
    ),
    "cojobs": Doc("The cojobs: hyperparameter searches, each a group of jobs run in stages."),
    "cojobs[].id": Doc("The cojob's name.", bounds="unique"),
    "cojobs[].arrival": Doc(
        "When the cojob arrives, in time units.", bounds=f"at most {MAX_ARRIVAL:g}"
    ),
    "cojobs[].stages": Doc(
        "Iterations of each stage, in order (successive halving kills jobs between them).",
        bounds=f"at most {MAX_STAGES} stages",
    ),
    "cojobs[].jobs": Doc("The cojob's jobs, one per hyperparameter setting."),
    "cojobs[].jobs[].id": Doc("The job's name.", bounds="unique in its cojob"),
    "cojobs[].jobs[].arch": Doc(
        "`ps`: workers push to and pull from every server; `ring`: ring all-reduce over "
        "the workers in order; `flows`: the per-iteration flows given."
    ),
    "cojobs[].jobs[].model_bytes": Doc(
        "Model size in bytes; a `ps` or `ring` job's traffic follows from it.",
        default="required with ps and ring",
    ),
    "cojobs[].jobs[].workers": Doc(
        "The hosts of the job's workers (a ring's order); each once.",
        bounds="a ring needs at least 2",
        default="required with ps and ring",
    ),
    "cojobs[].jobs[].servers": Doc(
        "The hosts of a `ps` job's parameter servers; each once.",
        bounds=f"workers x servers x 2 at most {MAX_FLOWS:g} flows",
        default="required with ps",
    ),
    "cojobs[].jobs[].flows": Doc(
        "A `flows` job's traffic per iteration.", default="required with flows"
    ),
    "cojobs[].jobs[].flows[].src": Doc("The sending host."),
    "cojobs[].jobs[].flows[].dst": Doc("The receiving host."),
    "cojobs[].jobs[].flows[].bytes": Doc("Bytes the flow moves per iteration."),
    "cojobs[].jobs[].compute_time": Doc("Time units of compute per iteration."),
    "cojobs[].jobs[].stages": Doc(
        "The job runs this many of its cojob's stages, then is killed.",
        default="every stage",
    ),
    "cojobs[].jobs[].done": Doc(
        "Iterations already done when the workload starts.",
        bounds="fewer than the job's iterations",
    ),
    "cojobs[].jobs[].weight": Doc(
        "Importance: a stage weighs as its heaviest job.", bounds="at most 1e6"
    ),
}
