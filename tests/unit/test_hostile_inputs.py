"""Issue 33: generated workloads, cluster configs and argument lists, hostile on purpose
(non-ASCII digits, huge and tiny numbers, duplicates, contradictions, outputs that
cannot be written). Every command either succeeds or exits 2 with exactly one line on
standard error, within a time bound, and never with a traceback. The argument lists
cover every subcommand the parser has, so new ones are covered as they come.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import io
import shutil
import signal
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grouper.cli import main as cli
from grouper.common.cluster_config import check_agent_endpoints, parse_cluster_config
from grouper.common.errors import ConfigError
from grouper.workloads.schema import parse_workload

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((ROOT / "docs" / "cluster.sample.yaml").read_text())
OUT = Path(tempfile.mkdtemp(prefix="grouper-hostile-"))
atexit.register(shutil.rmtree, OUT, True)  # whoever imports this module
(OUT / "a-file").write_text("x")
(OUT / "a-dir").mkdir()
SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}

# text a careless or hostile user types where a number goes
NUMBER_TEXT = st.sampled_from(
    ["1", "0", "-1", "1e999", "1e-300", "1e300", "nan", "inf", "", " 7 ", "0x10", "1_000",
     "\u00b9", "\u0663\u0660", "\uff11\uff12", "\u09e8", "2" * 400, "3.5", "-0", "1e6"]
)  # fmt: skip
NUMBERS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 2, 1e-300, 1e-9, 1e300, 10**400, 10**20, 0.5, 1e6, 1e9]),
    NUMBER_TEXT,
)
HOSTS = ["h1", "h2", "h3"]
HOST = st.one_of(st.sampled_from(HOSTS), st.sampled_from(["h9", "", "h\u00b9", "../x"]))


@contextlib.contextmanager
def time_bound(seconds: int) -> Iterator[None]:
    """Fail (not hang) when the body runs past ``seconds``."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"no answer within {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_cli(argv: list[str], seconds: int = 60, *, dry_run: bool = False) -> tuple[int, str]:
    """``grouper ARGV`` in this process: (exit status, standard error). Any exception
    but argparse's SystemExit (a traceback, for a user) fails the test."""
    err, out = io.StringIO(), io.StringIO()
    with (
        time_bound(seconds),
        contextlib.chdir(OUT),  # relative outputs land in the scratch folder
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(out),
    ):
        try:
            code = cli.main(argv, dry_run=dry_run)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, err.getvalue()


def assert_clean(code: int, stderr: str, argv: list[str]) -> None:
    assert code in (0, 2), (argv, code, stderr[-500:])
    assert "Traceback" not in stderr, (argv, stderr[-500:])
    if code == 2:
        assert stderr.count("\n") == 1 and stderr.startswith("grouper: error: "), (argv, stderr)
        assert stderr.endswith("\n") and len(stderr) < 400, (argv, stderr)


def one_line_or_accepted(fn, data) -> object | None:
    try:
        return fn(data)
    except ConfigError as exc:
        text = str(exc)
        assert "\n" not in text and len(text) <= 330, text
        return None


# -- workloads ---------------------------------------------------------------------
def maybe(good: st.SearchStrategy, bad: st.SearchStrategy = NUMBERS) -> st.SearchStrategy:
    """Mostly a sensible value, one time in twelve a hostile one: most documents hold one or
    two bad fields among good ones, and some are entirely good (and run)."""
    return st.integers(0, 11).flatmap(lambda k: bad if k == 11 else good)


GOOD_BYTES = st.sampled_from([1e3, 1e5, 2.5e6, 4e6])
WORKERS = st.lists(maybe(st.sampled_from(HOSTS), HOST), min_size=2, max_size=3)


@st.composite
def jobs(draw: st.DrawFn, index: int) -> dict:
    arch = draw(maybe(st.sampled_from(["ps", "ring", "flows"]), st.just("mesh")))
    job: dict = {"id": draw(maybe(st.just(f"j{index}"), st.sampled_from(["j0", ""]))), "arch": arch}
    if arch == "flows":
        flow = st.fixed_dictionaries(
            {"src": maybe(st.just("h1"), HOST), "dst": maybe(st.just("h2"), HOST),
             "bytes": maybe(GOOD_BYTES)}
        )  # fmt: skip
        job["flows"] = draw(
            st.lists(flow, min_size=draw(maybe(st.just(1), st.just(0))), max_size=3)
        )
    else:
        job["model_bytes"] = draw(maybe(GOOD_BYTES))
        job["workers"] = draw(WORKERS)
        if arch == "ps" or draw(st.integers(0, 5)) == 5:
            job["servers"] = draw(
                st.lists(maybe(st.sampled_from(HOSTS), HOST), min_size=1, max_size=2)
            )
    for key, good in (("compute_time", st.sampled_from([0, 0.01])), ("done", st.just(0)),
                      ("weight", st.just(2)), ("stages", st.just(1))):  # fmt: skip
        if draw(st.integers(0, 3)) == 3:
            job[key] = draw(maybe(good))
    return job


@st.composite
def workloads(draw: st.DrawFn) -> dict:
    doc: dict = {"hosts": draw(maybe(st.just(HOSTS), st.lists(HOST, max_size=4)))}
    doc["capacity"] = draw(maybe(st.sampled_from([1e6, 1e9, 1.25e9])))
    if draw(st.integers(0, 3)) == 3:
        doc["time_unit"] = draw(maybe(st.just("unit"), st.sampled_from(["", "\u00b5s"])))
    if draw(st.integers(0, 4)) == 4:
        doc["model"] = {
            "local_traffic": draw(maybe(st.sampled_from(["drop", "ports"]), st.just("x")))
        }
    if draw(st.integers(0, 4)) == 4:
        doc["scheduling"] = {"period": draw(maybe(st.sampled_from([0, 0.5])))}
    cojobs = []
    for g in range(draw(st.integers(1, 2))):
        stages = draw(st.lists(maybe(st.integers(1, 4)), min_size=1, max_size=3))
        cojob = {"id": f"c{g}", "stages": stages}
        cojob["jobs"] = [draw(jobs(i)) for i in range(draw(st.integers(1, 2)))]
        if draw(st.booleans()):
            cojob["arrival"] = draw(maybe(st.integers(0, 3)))
        cojobs.append(cojob)
    doc["cojobs"] = cojobs
    return doc


@settings(max_examples=400, **SETTINGS)
@given(workloads())
def test_generated_workloads_parse_or_fail_in_one_line(doc):
    one_line_or_accepted(parse_workload, doc)


@settings(max_examples=14, **SETTINGS)
@given(workloads())
def test_generated_workloads_through_order_lower_bound_and_simulate(doc):
    path = OUT / "w.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    json = str(OUT / "r.json")
    for argv in (
        ["order", "--workload", str(path), "--json", json],
        ["lower-bound", "--workload", str(path), "--seconds", "5", "--json", json],
        ["simulate", "--workload", str(path), "--policies", "fs,grouper", "--timeout", "20",
         "--out", str(OUT / "sim"), "--json", json],
    ):  # fmt: skip
        code, err = run_cli(argv, 60)
        assert_clean(code, err, argv)


# -- cluster configs ---------------------------------------------------------------
NIC = st.one_of(
    st.sampled_from(["eth0", "enp1s0f0np0", "enp1s0f0np0-extra", "eth0/1", "eth 0", "$(id)",
                     "eth0;reboot", ".", "..", "e\u00e9", "a" * 15, "a" * 16]),
    st.text(max_size=20),
)  # fmt: skip
ADDRESS = st.one_of(
    st.sampled_from(["10.0.0.1", "0.0.0.0", "255.255.255.255", "224.0.0.1", "10.0.1.11",
                     "240.0.0.1", "10.0.0", "::1", ""]),
    st.ip_addresses(v=4).map(str),
)  # fmt: skip
ENDPOINT = st.one_of(
    st.builds(lambda a, p: f"{a}:{p}", ADDRESS, NUMBER_TEXT),
    st.sampled_from(["'; rm -rf /:7070", "unix:", "unix:/run/a.sock", "[::1]:7070", "::1:7070",
                     "h:7\u00b9", "10.0.0.11:7070", "gpu01:7070", "[ff02::1]:7070"]),
)  # fmt: skip
CONFIG_FIELDS = {
    ("hosts", 0, "nic"): NIC,
    ("hosts", 1, "nic"): NIC,
    ("hosts", 0, "address"): ADDRESS,
    ("hosts", 1, "address"): ADDRESS,
    ("hosts", 0, "agent"): ENDPOINT,
    ("hosts", 1, "agent"): ENDPOINT,
    ("hosts", 0, "address6"): st.sampled_from(["ff02::1", "::", "fd00::1", "fd00:1::12", "x"]),
    ("hosts", 0, "link_mbps"): NUMBERS,
    ("hosts", 1, "name"): st.sampled_from(["gpu01", "gpu 02", "g\u00b9", "10.0.1.11"]),
    ("scheduling", "period"): NUMBERS,
    ("scheduling", "min_gap"): NUMBERS,
    ("scheduling", "keep_order_within"): NUMBERS,
    ("scheduling", "progress_step"): NUMBERS,
    ("scheduling", "progress_interval"): NUMBERS,
    ("failure", "plan_ttl"): NUMBERS,
    ("failure", "agent_timeout"): NUMBERS,
    ("queues", "reserved"): st.lists(st.integers(-1, 9), max_size=3),
    ("queues", "count"): NUMBERS,
    ("agent", "port"): NUMBERS,
    ("agent", "metrics_port"): NUMBERS,
    ("coordinator", "listen"): ENDPOINT,
    ("admission", "b"): NUMBERS,
}


@st.composite
def configs(draw: st.DrawFn) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(SAMPLE))
    for path in draw(st.lists(st.sampled_from(sorted(CONFIG_FIELDS, key=str)), max_size=4)):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = draw(CONFIG_FIELDS[path])
    return doc


def parse_and_check(doc: dict) -> object:
    cfg = parse_cluster_config(doc)
    check_agent_endpoints(cfg.hosts)
    return cfg


@settings(max_examples=400, **SETTINGS)
@given(configs())
def test_generated_configs_parse_or_fail_in_one_line(doc):
    one_line_or_accepted(parse_and_check, doc)


@settings(max_examples=25, **SETTINGS)
@given(configs())
def test_check_config_answers_generated_configs_in_one_line(doc):
    path = OUT / "c.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    code, err = run_cli(["check-config", str(path)], 20)
    assert_clean(code, err, ["check-config", str(path)])


# -- argument lists over every subcommand -----------------------------------------
def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict:
    """Every leaf subcommand (``("bench", "pda")``, ...) -> its parser."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(subcommands(sub, (*prefix, name)) or {(*prefix, name): sub})
    return out


COMMANDS = subcommands(cli.build_parser())
VALUES = st.one_of(
    NUMBER_TEXT,
    st.sampled_from(["builtin:fig3", "builtin:sim60", "builtin:nope", "fs,grouper", "fs,,x",
                     "sweep", "load", "jobs", "h1,h4", "'; rm -rf /:7070", "h:7\u00b9", "-",
                     "/dev/full", "/", str(OUT / "a-dir"), str(OUT / "a-file" / "x"),
                     str(OUT / "new" / "deeper"), "lwf:\u0663", "a" * 300]),
    st.text(max_size=12),
)  # fmt: skip


@st.composite
def argument_lists(draw: st.DrawFn) -> list[str]:
    name = draw(st.sampled_from(sorted(COMMANDS)))
    parser = COMMANDS[name]
    argv = list(name)
    options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
    for action in draw(st.lists(st.sampled_from(options), max_size=5)) if options else []:
        argv.append(action.option_strings[-1])
        if action.nargs != 0:
            argv.append(draw(st.sampled_from(action.choices) if action.choices else VALUES))
    for action in parser._actions:
        if not action.option_strings and action.dest != "help" and draw(st.booleans()):
            argv.append(draw(VALUES))  # a positional (file, action), sometimes left out
    return [a for a in argv if not a.startswith("-h")]


@settings(max_examples=600, **SETTINGS)
@given(argument_lists())
def test_generated_argument_lists_for_every_subcommand_are_checked_in_one_line(argv):
    """Parsing and every check of the flags (what runs before any work)."""
    code, err = run_cli(argv, 20, dry_run=True)
    assert_clean(code, err, argv)


def test_every_subcommand_is_generated():
    names = {" ".join(n) for n in COMMANDS}
    assert {"order", "simulate", "check-config", "bench pda", "agent", "run"} <= names


CHEAP = st.sampled_from(
    [["order", "--workload", "builtin:fig3"], ["bench", "ratio", "--instances", "3"],
     ["bench", "pda", "--hosts", "8", "--stages", "20"], ["lower-bound", "--workload",
     "builtin:fig3"], ["simulate", "--workload", "builtin:fig3", "--policies", "fs"]]
)  # fmt: skip
CHEAP_FLAGS = st.sampled_from(
    ["--json", "--out", "--seed", "--policy", "--policies", "--period", "--runs", "--seconds",
     "--max-sim-time", "--timeout", "--load", "--what", "--max-cojobs", "--online"]
)  # fmt: skip


@settings(max_examples=30, **SETTINGS)
@given(CHEAP, st.lists(st.tuples(CHEAP_FLAGS, VALUES), max_size=3))
def test_cheap_commands_run_with_generated_flags_in_one_line(base, extra):
    """The same lists run for real on commands that finish in seconds."""
    argv = list(base)
    for option, value in extra:
        if value.startswith("/") and not value.startswith((str(OUT), "/dev/full")):
            value = str(OUT / "elsewhere")  # runs for real: never write outside the scratch
        argv += [option] if option == "--online" else [option, value]
    if argv[0] == "simulate" and "--out" not in argv:
        argv += ["--out", str(OUT / "sim")]
    code, err = run_cli(argv, 90)
    assert_clean(code, err, argv)


def flows_job(**flow: object) -> dict:
    return {"id": "j", "arch": "flows", "flows": [{"src": "a", "dst": "b", "bytes": 1e6, **flow}]}


def workload(job: dict, stages: list | None = None, **top: object) -> dict:
    doc = {"hosts": ["a", "b"], "capacity": 1e9, **top}
    return {**doc, "cojobs": [{"id": "c", "stages": stages or [2], "jobs": [job]}]}


RING = {"id": "j", "arch": "ring", "model_bytes": 1e6}
WIDE = [f"h{i}" for i in range(1000)]
PS = {"id": "j", "arch": "ps", "model_bytes": 1e6}


@pytest.mark.parametrize(
    ("doc", "message"),
    [  # issue 33's workloads: tracebacks and hangs before
        (workload(flows_job(), [10**30]), r"cojobs\[0\]\.stages\[0\]: must be at most 100000000,"),
        (workload(flows_job(bytes=10**400)), r"flows\[0\]\.bytes: too large \(at most 1e\+15\)"),
        (workload(flows_job(bytes=1e300)), r"flows\[0\]\.bytes: must be at most 1e\+15"),
        (workload(flows_job(bytes=1e-300)), r"flows\[0\]\.bytes: must be at least 0\.001"),
        (workload({**RING, "workers": ["a", "a"]}), r"jobs\[0\]\.workers\[1\]: host 'a' is listed"),
        (workload({**PS, "workers": ["a"], "servers": ["a"]}), r"jobs\[0\]\.servers: every flow"),
        (workload(flows_job(dst="a")), r"jobs\[0\]\.flows: every flow stays on host 'a'"),
        (workload(flows_job(), capacity=1e20), r"^capacity: 1e\+20 bytes per second is outside"),
        (workload(flows_job(), [4] * 1001), r"cojobs\[0\]\.stages: 1001 stages, at most 1000"),
        (workload({**RING, "workers": ["a", "b"], "compute_time": 1e9}), r"compute_time: must be"),
        (workload(flows_job(), scheduling={"period": 1e-6}), r"^scheduling\.period: must be 0 \("),
        (
            workload({**PS, "workers": WIDE, "servers": WIDE}, hosts=WIDE),
            r"jobs\[0\]\.servers: 1000 workers x 1000 servers make over 1e\+06 flows",
        ),
    ],
)
def test_the_issues_workloads_are_refused_by_name(doc, message):
    with pytest.raises(ConfigError, match=message):
        parse_workload(doc)


def test_a_workload_too_long_to_simulate_is_refused_before_it_starts():
    path = OUT / "long.yaml"
    path.write_text(yaml.safe_dump(workload(flows_job(bytes=1e3), [10**8] * 3)))
    code, err = run_cli(["simulate", "--workload", str(path), "--policies", "fs"], 20)
    assert code == 2 and "3e+08 iterations and 0 scheduling rounds (at least" in err, err


def test_timeout_stops_a_long_simulation_in_one_line():
    path = OUT / "long.yaml"
    path.write_text(yaml.safe_dump(workload(flows_job(bytes=1e3), [10**6])))
    argv = ["simulate", "--workload", str(path), "--policies", "fs", "--timeout", "1"]
    started = time.monotonic()
    code, err = run_cli([*argv, "--out", str(OUT / "sim")], 30)
    assert code == 2 and err.startswith("grouper: error: --timeout: fs: stopped at"), err
    assert time.monotonic() - started < 10


def test_max_sim_time_stops_a_run_past_it():
    from grouper.simulator.limits import RunLimits
    from grouper.simulator.run import run_policies

    wl = parse_workload(workload(flows_job(), [50], capacity=1e6))  # 50 s alone
    with pytest.raises(ConfigError, match=r"^--max-sim-time: fs: still running at simulated"):
        run_policies(wl, ["fs"], progress=False, limits=RunLimits(max_time=10.0))
    assert run_policies(wl, ["fs"], progress=False, limits=RunLimits(max_time=60.0))
