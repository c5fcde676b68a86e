"""The workload file format (docs/explanation/workloads.md; every key in the generated
docs/reference/workload-format.md).

Every error is a :class:`ConfigError` whose path names the field, e.g.
``cojobs[0].jobs[1].workers: a ring needs at least 2 host(s), got 1``.
"""

from __future__ import annotations

from dataclasses import replace
from importlib import resources
from typing import Any

from grouper.common import limits as L
from grouper.common import validate as v
from grouper.common.errors import ConfigError
from grouper.common.flows import ARCHS
from grouper.common.queues import QueueConfig
from grouper.common.scheduling import parse_admission, parse_queues
from grouper.common.yamlfile import parse_yaml, read_text
from grouper.pda.model import Cojob, FlowSpec, Job
from grouper.workloads.checks import check_capacity, check_workload
from grouper.workloads.generators import GENERATORS
from grouper.workloads.model import Workload

TOP_KEYS = (
    "name", "description", "hosts", "topology", "capacity", "time_unit", "scheduling",
    "model", "cojobs",
)  # fmt: skip
SCHEDULING_KEYS = ("period", "queues", "admission")
MODEL_KEYS = ("ps_mode", "ring_mode", "contention", "local_traffic", "barrier", "goodput")
LOCAL_TRAFFIC = ("drop", "ports")
PS_MODES = ("sequential", "overlap")
RING_MODES = ("fluid", "steps")
CONTENTION_MODELS = ("wang", "none")
# a leafspine topology's capacity comes from its link speed
COJOB_KEYS = ("id", "arrival", "stages", "jobs")
MAX_ARRIVAL = L.MAX_ARRIVAL
JOB_KEYS = (
    "id",
    "arch",
    "model_bytes",
    "workers",
    "servers",
    "flows",
    "compute_time",
    "stages",
    "done",
    "weight",
)
FLOW_KEYS = ("src", "dst", "bytes")


def load_workload(spec: str, **params: float) -> Workload:
    """``builtin:NAME`` or a path to a YAML file. ``params`` go to generated builtins
    (``seed``, ``load``, ``comm_ratio``, ``scale``); ``coflow:PATH`` (a coflow-benchmark
    trace) takes ``link_gbps`` and ``fraction``."""
    if spec.startswith("coflow:"):
        from grouper.workloads.coflow_trace import load_coflow_trace

        return load_coflow_trace(spec.split(":", 1)[1], **params)
    if spec.startswith("builtin:"):
        name = spec.split(":", 1)[1]
        if name in GENERATORS:
            return GENERATORS[name](**params)
        ref = resources.files("grouper.workloads") / "builtin" / f"{name}.yaml"
        if not ref.is_file():
            known = sorted(
                [
                    p.name[:-5]
                    for p in (resources.files("grouper.workloads") / "builtin").iterdir()
                    if p.name.endswith(".yaml")
                ]
                + list(GENERATORS)
            )
            raise ConfigError("workload", f"unknown builtin {name!r} (known: {', '.join(known)})")
        return parse_workload(parse_yaml(ref.read_text(), "workload"), default_name=name)
    text = read_text(spec, "workload")
    return parse_workload(parse_yaml(text, "workload"), default_name=v.label_from_path(spec))


def _hosts_from_topology(spec: str, path: str) -> tuple[str, ...]:
    from grouper.workloads.topology import parse_topology

    try:
        return parse_topology(spec).hosts
    except ConfigError as exc:
        raise ConfigError(path, exc.problem) from None


def parse_workload(data: Any, default_name: str = "workload") -> Workload:
    top = v.mapping(data, "", TOP_KEYS)
    name = v.label(v.get(top, "name", "", default_name), "name")
    if "hosts" in top:
        hosts = tuple(
            v.string(h, f"hosts[{i}]")
            for i, h in enumerate(v.sequence(top["hosts"], "hosts", min_len=1))
        )
        if len(set(hosts)) != len(hosts):
            raise ConfigError("hosts", "duplicate host names")
        if top.get("topology"):  # both: they must name the same hosts, or which one holds?
            spec = v.string(top["topology"], "topology")
            if set(_hosts_from_topology(spec, "topology")) != set(hosts):
                raise ConfigError("hosts", "differ from the topology's hosts; give one of the two")
    elif "topology" in top:
        hosts = _hosts_from_topology(v.string(top["topology"], "topology"), "topology")
    else:
        raise ConfigError("hosts", "required (or give a topology)")
    known = set(hosts)
    capacity = v.number(v.get(top, "capacity", "", 1.0), "capacity", positive=True)
    time_unit = v.string(v.get(top, "time_unit", "", "s"), "time_unit")
    if "capacity" in top:  # unset: 1 byte per time unit, the textbook examples' unit
        check_capacity(capacity, time_unit)
    cojobs_raw = v.sequence(v.get(top, "cojobs", ""), "cojobs", min_len=1)
    model = v.mapping(top.get("model", {}), "model", MODEL_KEYS)
    barrier = v.boolean(model.get("barrier", True), "model.barrier")
    cojobs = []
    seen: set[str] = set()
    for g, raw in enumerate(cojobs_raw):
        cj = replace(_parse_cojob(raw, f"cojobs[{g}]", known), barrier=barrier)
        if cj.cojob_id in seen:
            raise ConfigError(f"cojobs[{g}].id", f"duplicate cojob id {cj.cojob_id!r}")
        seen.add(cj.cojob_id)
        cojobs.append(cj)
    topology = top.get("topology")
    period, queues = _scheduling(top.get("scheduling", {}))
    default_contention = "wang" if time_unit == "s" else "none"
    wl = Workload(
        name,
        hosts,
        tuple(cojobs),
        capacity,
        time_unit,
        topology=str(topology) if topology else None,
        period=period,
        queues=queues,
        ps_mode=v.choice(model.get("ps_mode", "sequential"), "model.ps_mode", PS_MODES),
        ring_mode=v.choice(model.get("ring_mode", "fluid"), "model.ring_mode", RING_MODES),
        contention=v.choice(
            model.get("contention", default_contention), "model.contention", CONTENTION_MODELS
        ),
        local_traffic=v.choice(
            model.get("local_traffic", "drop"), "model.local_traffic", LOCAL_TRAFFIC
        ),
        goodput=_goodput(model.get("goodput", 1.0)),
    )
    check_workload(wl)
    return wl


def _goodput(raw: Any) -> float:
    g = v.number(raw, "model.goodput", positive=True)
    if g > 1:
        raise ConfigError("model.goodput", f"must be in (0, 1], got {g:g}")
    return g


def _scheduling(raw: Any) -> tuple[float, QueueConfig | None]:
    """``scheduling: {period, queues, admission}`` -> (period, queue config or None)."""
    m = v.mapping(raw, "scheduling", SCHEDULING_KEYS)
    period = v.period(m.get("period", 0.0), "scheduling.period")
    if "queues" not in m and "admission" not in m:
        return period, None
    admission = parse_admission(m.get("admission", {}), "scheduling.")
    return period, parse_queues(m.get("queues", {}), admission, "scheduling.")


def _hosts(raw: Any, path: str, known: set[str]) -> tuple[str, ...]:
    out = []
    for i, h in enumerate(v.sequence(raw, path)):
        host = v.string(h, f"{path}[{i}]")
        if host not in known:
            raise ConfigError(f"{path}[{i}]", f"unknown host {host!r}")
        out.append(host)
    return tuple(out)


def _parse_cojob(raw: Any, path: str, known: set[str]) -> Cojob:
    m = v.mapping(raw, path, COJOB_KEYS)
    cid = v.string(v.get(m, "id", path), v.join(path, "id"))
    arrival = v.number(v.get(m, "arrival", path, 0.0), v.join(path, "arrival"), minimum=0)
    if arrival > MAX_ARRIVAL:
        raise ConfigError(
            v.join(path, "arrival"), f"{arrival:g} is past the {MAX_ARRIVAL:g} time-unit horizon"
        )
    stages_raw = v.sequence(v.get(m, "stages", path), v.join(path, "stages"), min_len=1)
    if len(stages_raw) > L.MAX_STAGES:
        raise ConfigError(
            v.join(path, "stages"), f"{len(stages_raw)} stages, at most {L.MAX_STAGES}"
        )
    stages = tuple(
        v.integer(x, f"{path}.stages[{k}]", minimum=1, maximum=L.MAX_ITERATIONS)
        for k, x in enumerate(stages_raw)
    )
    jobs_raw = v.sequence(v.get(m, "jobs", path), v.join(path, "jobs"), min_len=1)
    jobs = tuple(_parse_job(j, f"{path}.jobs[{i}]", known) for i, j in enumerate(jobs_raw))
    for i, job in enumerate(jobs):
        total = sum(stages[: job.stages or len(stages)])
        if job.done >= total:
            raise ConfigError(
                f"{path}.jobs[{i}].done",
                f"{job.done} iterations done of the job's {total}: nothing left to run",
            )
    try:
        return Cojob(cid, stages, jobs, arrival)
    except ConfigError as exc:
        raise ConfigError(v.join(path, exc.path), exc.problem) from None


def _parse_job(raw: Any, path: str, known: set[str]) -> Job:
    m = v.mapping(raw, path, JOB_KEYS)
    jid = v.string(v.get(m, "id", path), v.join(path, "id"))
    arch = v.choice(v.get(m, "arch", path), v.join(path, "arch"), ARCHS)
    kw: dict[str, Any] = {
        "compute_time": v.number(
            v.get(m, "compute_time", path, 0.0),
            v.join(path, "compute_time"),
            minimum=0,
            maximum=L.MAX_COMPUTE,
        ),
        "done": v.integer(
            v.get(m, "done", path, 0), v.join(path, "done"), minimum=0, maximum=L.MAX_STAGE_SUM
        ),
        "weight": v.number(v.get(m, "weight", path, 1.0), v.join(path, "weight"), positive=True),
    }
    if "stages" in m:
        kw["stages"] = v.integer(m["stages"], v.join(path, "stages"), minimum=1)
    try:
        if arch == "flows":
            for key in ("model_bytes", "workers", "servers"):
                if key in m:
                    raise ConfigError(key, "not used with arch 'flows'")
            flows_raw = v.sequence(v.get(m, "flows", path), v.join(path, "flows"), min_len=1)
            flows = [_parse_flow(f, f"{path}.flows[{i}]", known) for i, f in enumerate(flows_raw)]
            return Job.explicit(jid, flows, **kw)
        if "flows" in m:
            raise ConfigError("flows", f"not used with arch {arch!r} (traffic follows from it)")
        model = _bytes(v.get(m, "model_bytes", path), v.join(path, "model_bytes"))
        workers = _hosts(v.get(m, "workers", path), v.join(path, "workers"), known)
        if arch == "ps":
            servers = _hosts(v.get(m, "servers", path), v.join(path, "servers"), known)
            if 2 * len(workers) * len(servers) > L.MAX_FLOWS:  # every worker to every server
                raise ConfigError(
                    "servers",
                    f"{len(workers)} workers x {len(servers)} servers make over "
                    f"{L.MAX_FLOWS:.0e} flows",
                )
            return Job.ps(jid, model, workers, servers, **kw)
        if "servers" in m:
            raise ConfigError("servers", "a ring job has no servers")
        return Job.ring(jid, model, workers, **kw)
    except ConfigError as exc:
        if exc.path.startswith(path):
            raise
        raise ConfigError(v.join(path, exc.path), exc.problem) from None


def _parse_flow(raw: Any, path: str, known: set[str]) -> FlowSpec:
    m = v.mapping(raw, path, FLOW_KEYS)
    ends = []
    for key in ("src", "dst"):
        host = v.string(v.get(m, key, path), v.join(path, key))
        if host not in known:
            raise ConfigError(v.join(path, key), f"unknown host {host!r}")
        ends.append(host)
    size = _bytes(v.get(m, "bytes", path), v.join(path, "bytes"))
    return FlowSpec(ends[0], ends[1], size)


def _bytes(raw: Any, path: str) -> float:
    """Bytes per iteration: MIN_BYTES to MAX_BYTES."""
    return v.number(raw, path, positive=True, minimum=L.MIN_BYTES, maximum=L.MAX_BYTES)
