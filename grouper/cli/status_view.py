"""What ``grouper status`` shows: a snapshot from two rounds of reports (``snapshot``,
also the ``--json`` output) and its screen, drawn with rich (issue #34): ``view`` builds
it (a ``rich.table.Table`` per section), ``print_once`` prints it (plain and unwrapped
when not a terminal), ``watch`` redraws it in place (``rich.live.Live``), ``render``
gives it as plain text.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from grouper.common.cluster_config import ClusterConfig

ORDER_SHOWN = 12  # stages of the global order on the screen
FLOWS_SHOWN = 16  # host flows on the screen (all of them in --json)


def _by_label(samples: dict[str, Any], name: str, label: str) -> dict[str, float]:
    return {labels.get(label, ""): value for labels, value in samples.get(name, [])}


def _one(samples: dict[str, Any], name: str) -> float | None:
    values = samples.get(name, [])
    return values[0][1] if values else None


def coordinator_view(raw: dict[str, Any]) -> dict[str, Any]:
    out = {k: raw[k] for k in ("up", "address", "error") if k in raw}
    if not raw.get("up"):
        return out
    s = raw["samples"]
    ranks = _by_label(s, "stage_rank", "stage")
    return out | {
        "agents_up": _one(s, "agents_up"),
        "agent_up": {h: bool(v) for h, v in _by_label(s, "agent_up", "host").items()},
        "stages": _one(s, "stages"),
        "order": sorted(ranks, key=lambda stage: ranks[stage]),
        "cycles": _by_label(s, "cycles_total", "trigger"),
        "cycle_seconds": _by_label(s, "cycle_seconds", "step"),
        "plans_pushed": _by_label(s, "plans_pushed_total", "form"),
        "jobs_ended": _by_label(s, "jobs_ended_total", "how"),
        "errors": _by_label(s, "errors_total", "kind"),
    }


def _bands(prev: dict[str, Any] | None, cur: dict[str, Any], dt: float) -> list[dict[str, Any]]:
    out = []
    before = prev["bands"] if prev else {}
    for band, c in sorted(cur["bands"].items()):
        row: dict[str, Any] = {"band": band, **c, "mbps": None, "drops_per_s": None}
        p = before.get(band)
        if p and dt > 0 and c["bytes"] >= p["bytes"] and c["drops"] >= p["drops"]:
            row["mbps"] = (c["bytes"] - p["bytes"]) * 8 / dt / 1e6
            row["drops_per_s"] = (c["drops"] - p["drops"]) / dt
        out.append(row)
    return out


def _flows(report: dict[str, Any], scavenger: int | None) -> list[dict[str, Any]]:
    """The plan in force, each flow with its job's current stage and whether admitted."""
    stage_of = {
        (j["cojob"], j["job"]): f"{j['cojob']}/{j['stages_finished'] + 1}" for j in report["jobs"]
    }
    out = []
    for f in report["flows"]:
        cojob, _, rest = f["flow_id"].partition("/")
        job = rest.partition("/")[0]
        stage = stage_of.get((cojob, job), "")
        out.append(f | {"stage": stage, "admitted": scavenger is None or f["band"] != scavenger})
    return out


def _cojobs(reports: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    jobs: dict[tuple[str, str], dict[str, Any]] = {}
    for host, r in sorted(reports.items()):
        for j in r["jobs"]:
            merged = jobs.setdefault(
                (j["cojob"], j["job"]),
                {"job": j["job"], "stages": j["stages"], "hosts": [], "finished": True}
                | {"stages_finished": 0, "iterations_done": 0},
            )
            merged["hosts"].append(host)
            merged["finished"] = merged["finished"] and j["finished"]
            for k in ("stages_finished", "iterations_done"):
                merged[k] = max(merged[k], j[k])
    cojobs: dict[str, list[dict[str, Any]]] = {}
    for (cojob, _), j in sorted(jobs.items()):
        cojobs.setdefault(cojob, []).append(j)
    return [{"cojob": c, "jobs": js} for c, js in cojobs.items()]


def _admission(hosts: list[dict[str, Any]], scavenger: int | None) -> dict[str, Any]:
    if scavenger is None:
        return {"scavenger_band": None, "admitted": [], "waiting": []}
    admitted, seen = set(), set()
    for h in hosts:
        for f in h.get("flows", []):
            if f["stage"]:
                seen.add(f["stage"])
                if f["admitted"]:
                    admitted.add(f["stage"])
    return {
        "scavenger_band": scavenger,
        "admitted": sorted(admitted),
        "waiting": sorted(seen - admitted),
    }


def snapshot(cfg: ClusterConfig, prev: dict[str, Any], cur: dict[str, Any]) -> dict[str, Any]:
    dt = cur["at"] - prev["at"]
    scavenger = cfg.queues.scavenger_band
    hosts, reports = [], {}
    for name, raw in cur["hosts"].items():
        if not raw["up"]:
            hosts.append({"host": name, "up": False, "error": raw["error"]})
            continue
        r = reports[name] = raw["report"]
        before = prev["hosts"].get(name, {}).get("report")
        hosts.append(
            {"host": name, "up": True}
            | {k: r[k] for k in ("plan_version", "priorities_active", "backend")}
            | {"bands": _bands(before, r, dt), "flows": _flows(r, scavenger)}
        )
    return {
        "cluster": cfg.cluster,
        "time": time.time(),
        "interval": dt,
        "coordinator": coordinator_view(cur["coordinator"]),
        "hosts": hosts,
        "cojobs": _cojobs(reports),
        "admission": _admission(hosts, scavenger),
    }


def _num(x: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if x is None else fmt.format(x)


def _table(title: str, headers: list[str], rows: list[list[Any]], caption: str = "") -> Table:
    """One section; cells are text (never rich markup), numeric columns right-aligned."""
    t = Table(title=title, caption=caption or None, box=box.SIMPLE_HEAD)
    t.title_justify = t.caption_justify = "left"
    for i, h in enumerate(headers):
        numeric = bool(rows) and all(isinstance(r[i], int | float) for r in rows)
        t.add_column(h, justify="right" if numeric else "left")
    for r in rows:
        t.add_row(*(c if isinstance(c, Text) else Text(str(c)) for c in r))
    return t


def _coordinator_lines(c: dict[str, Any], hosts: int) -> list[str]:
    where = c.get("address", "")
    if not c.get("up"):
        return [f"coordinator {where}: not reachable ({c.get('error', '')})"]

    def counts(d: dict[str, float]) -> str:
        inner = ", ".join(f"{k} {v:g}" for k, v in sorted(d.items()))
        return f"{sum(d.values()):g}" + (f" ({inner})" if inner else "")

    order = c["order"]
    more = f" (+{len(order) - ORDER_SHOWN} more)" if len(order) > ORDER_SHOWN else ""
    return [
        f"coordinator {where}: agents up {_num(c['agents_up'], '{:g}')}/{hosts}, "
        f"stages {_num(c['stages'], '{:g}')}, cycles {counts(c['cycles'])}, "
        f"plans pushed {counts(c['plans_pushed'])}, errors {counts(c['errors'])}",
        "global order: " + (" > ".join(order[:ORDER_SHOWN]) or "(no stages)") + more,
    ]


def _host_rows(snap: dict[str, Any], bands: int) -> list[list[Any]]:
    rows = []
    for h in snap["hosts"]:
        if not h["up"]:
            rows.append([h["host"], Text(f"down: {h['error']}", "red"), "", "", "", *[""] * bands])
            continue
        by_band = {b["band"]: b for b in h["bands"]}
        cells = []
        for band in range(bands):
            b = by_band.get(band)
            cell = _num(b and b["mbps"])
            if b and b["drops_per_s"]:
                cell += f" ({b['drops_per_s']:.0f} drops/s)"
            cells.append(cell)
        active = Text("yes") if h["priorities_active"] else Text("NO", "bold red")
        rows.append([h["host"], "up", h["plan_version"], active, h["backend"], *cells])
    return rows


def _job_rows(snap: dict[str, Any]) -> list[list[Any]]:
    order = snap["coordinator"].get("order", [])
    rank = {stage: i + 1 for i, stage in enumerate(order)}
    waiting = set(snap["admission"]["waiting"])
    rows = []
    for c in snap["cojobs"]:
        for j in c["jobs"]:
            stage = f"{c['cojob']}/{j['stages_finished'] + 1}"
            state = "finished" if j["finished"] else ("waiting" if stage in waiting else "")
            rows.append(
                [c["cojob"], j["job"], ",".join(j["hosts"]), "" if j["finished"] else stage]
                + [rank.get(stage, "-"), f"{j['stages_finished']}/{len(j['stages'])}"]
                + [j["iterations_done"], Text(state, "yellow" if state == "waiting" else "")]
            )
    return rows


def view(snap: dict[str, Any]) -> Group:
    """The screen: the coordinator's lines, a table each of hosts, jobs, flows; admission."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(snap["time"]))
    bands = 1 + max((b["band"] for h in snap["hosts"] if h["up"] for b in h["bands"]), default=-1)
    title = f"grouper status: cluster {snap['cluster']}, {stamp}, rates over "
    flows = [[h["host"], f["flow_id"], f["band"], f["dscp"], f["stage"]]
             + ["yes" if f["admitted"] else Text("waiting", "yellow")]
             for h in snap["hosts"] if h["up"] for f in h["flows"]]  # fmt: skip
    more = f"+{len(flows) - FLOWS_SHOWN} more: --json" if len(flows) > FLOWS_SHOWN else ""
    hosts = ["HOST", "AGENT", "PLAN", "PRIORITIES", "BACKEND"]
    parts: list[Text | Table] = [
        Text(title + f"{snap['interval']:.1f} s", "bold"),
        *map(Text, _coordinator_lines(snap["coordinator"], len(snap["hosts"]))),
        _table("hosts", hosts + [f"B{b} Mbit/s" for b in range(bands)], _host_rows(snap, bands)),
        _table("jobs", ["COJOB", "JOB", "HOSTS", "STAGE", "RANK", "STAGES", "ITER", ""],
               _job_rows(snap)),
        _table("flows", ["HOST", "FLOW", "BAND", "DSCP", "STAGE", "ADMITTED"],
               flows[:FLOWS_SHOWN], more),
    ]  # fmt: skip
    adm = snap["admission"]
    if adm["scavenger_band"] is not None:
        waiting = ", ".join(adm["waiting"]) or "none"
        parts.append(Text(f"admission: {len(adm['admitted'])} stage(s) admitted, waiting "
                          f"(band {adm['scavenger_band']}): {waiting}"))  # fmt: skip
    return Group(*parts)


def print_once(snap: dict[str, Any], console: Console | None = None) -> None:
    """One screen to ``console`` (stdout); not a terminal: unwrapped, without ANSI codes."""
    console = console or Console()
    screen = view(snap)
    if console.is_terminal:
        return console.print(screen)
    unbounded = console.options.update_width(1 << 16)
    console.width = max(console.width, Measurement.get(console, unbounded, screen).maximum)
    with console.capture() as text:
        console.print(screen)
    console.file.write("".join(line.rstrip() + "\n" for line in text.get().splitlines()))


def render(snap: dict[str, Any]) -> str:
    """The screen as plain text: what ``--once`` prints into a pipe or file."""
    console = Console(file=io.StringIO(), color_system=None, force_terminal=False)
    print_once(snap, console)
    return console.file.getvalue()


def watch(snaps: Iterable[dict[str, Any]], console: Console | None = None) -> None:
    """Each snapshot drawn over the last until ``snaps`` ends (or Ctrl-C: the caller's)."""
    with Live(console=console or Console(), auto_refresh=False) as live:
        for snap in snaps:
            live.update(view(snap), refresh=True)
