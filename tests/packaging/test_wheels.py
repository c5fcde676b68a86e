"""The two distributions as users install them, each into a clean venv beside its lock
and nothing else: the full ``grouper`` wheel (an operator's host) and the
``grouper-client`` wheel (a training environment). Commands run from a directory
outside the checkout, so nothing is imported from the source tree."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from tests.install import ROOT, build_wheel, make_venv

# protobuf one major release older than the stubs' gencode (7.35): the stubs refuse it
OLD_PROTOBUF = "protobuf==6.33.5"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    return {"full": build_wheel(ROOT, out), "client": build_wheel(ROOT / "client", out)}


def names(wheel: Path) -> set[str]:
    return set(zipfile.ZipFile(wheel).namelist())


def test_both_wheels_carry_stubs_generated_at_build_time(wheels):
    for wheel in wheels.values():
        assert {"grouper/v1/agent_pb2.py", "grouper/v1/agent_pb2_grpc.py"} <= names(wheel)


def test_client_wheel_holds_only_the_training_side(wheels):
    tops = {n.split("/")[0] for n in names(wheels["client"]) if not n.startswith("grouper_")}
    assert tops == {"grouper"}, "no generic top-level modules in a training environment"
    modules = {n for n in names(wheels["client"]) if n.startswith("grouper/")}
    assert {"grouper/client.py", "grouper/launcher.py", "grouper/client_main.py"} <= modules
    assert not [m for m in modules if m.startswith("grouper/cli/")], "no command line"
    meta = zipfile.ZipFile(wheels["client"])
    (info,) = [n for n in meta.namelist() if n.endswith(".dist-info/METADATA")]
    lines = meta.read(info).decode().splitlines()
    requires = [ln for ln in lines if ln.startswith("Requires-Dist")]
    assert sorted(re.split(r"[<>=!~ ;]", r.split()[1])[0] for r in requires) == [
        "grpcio",
        "protobuf",
    ]


@pytest.fixture(scope="module")
def full_venv(wheels, tmp_path_factory):
    return make_venv(tmp_path_factory.mktemp("full") / "venv", "hosts.txt", wheels["full"])


def test_full_wheel_installs_one_top_level_name(wheels):
    tops = {n.split("/")[0] for n in names(wheels["full"]) if ".dist-info/" not in n}
    assert tops == {"grouper"}
    folders = {"common", "pda", "workloads", "agent", "coordinator", "simulator", "trafficgen",
               "topologies", "experiments"}  # fmt: skip
    assert {n.split("/")[1] for n in names(wheels["full"]) if n.count("/") > 1} >= folders
    assert "grouper/workloads/builtin/fig3.yaml" in names(wheels["full"])


def test_a_users_own_agent_or_common_module_does_not_shadow_ours(full_venv, tmp_path):
    for name in ("common", "pda", "agent", "coordinator", "workloads", "simulator"):
        (tmp_path / f"{name}.py").write_text(f"raise SystemExit('{name} was shadowed')\n")
    proc = subprocess.run(
        [full_venv / "python", "-m", "grouper.cli", "order", "--workload", "builtin:fig3",
         "--json", "-"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["workload"] == "fig3"


def test_full_wheel_in_a_clean_venv_runs_the_commands(full_venv, tmp_path):
    grouper = str(full_venv / "grouper")

    def run(*args):
        return subprocess.run([grouper, *args], cwd=tmp_path, capture_output=True, text=True)

    assert run("--help").returncode == 0
    check = run("check-config", str(ROOT / "docs" / "cluster.sample.yaml"))
    assert check.returncode == 0, check.stderr
    order = run("order", "--workload", "builtin:fig3", "--json", "-")
    assert order.returncode == 0, order.stderr
    assert json.loads(order.stdout)["workload"] == "fig3"


TRAIN = textwrap.dedent(
    """
    import warnings
    from grouper.client import Job
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with Job(cojob="c", job="j", stages=[3, 3], socket=SOCKET) as job:
            for stage in job.stages:
                for _ in range(stage):
                    job.step()
                job.stage_done()
    print(job.iterations_done, len(caught), caught[0].message if caught else "")
    """
)


def train(python: Path, socket: Path, cwd: Path) -> tuple[int, int, str]:
    proc = subprocess.run(
        [python, "-c", TRAIN.replace("SOCKET", repr(str(socket)))],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    done, warned, message = proc.stdout.split(" ", 2)
    return int(done), int(warned), message.strip()


@pytest.fixture(scope="module")
def client_venv(wheels, tmp_path_factory):
    return make_venv(tmp_path_factory.mktemp("client") / "venv", "client.txt", wheels["client"])


def test_client_venv_has_grpc_and_protobuf_only(client_venv):
    frozen = subprocess.run(
        [client_venv / "python", "-m", "pip", "freeze"], capture_output=True, text=True
    ).stdout
    assert {re.split(r"[=@ ]", ln)[0] for ln in frozen.splitlines()} == {
        "grouper-client",
        "grpcio",
        "protobuf",
        "typing_extensions",
    }


def test_client_without_an_agent_warns_once_and_training_goes_on(client_venv, tmp_path):
    done, warned, message = train(client_venv / "python", tmp_path / "absent.sock", tmp_path)
    assert (done, warned) == (6, 1) and "no agent socket" in message


def test_client_run_without_an_agent_runs_the_command(client_venv, tmp_path):
    proc = subprocess.run(
        [client_venv / "grouper", "run", "--cojob", "c", "--job", "j", "--stages", "2",
         "--socket", tmp_path / "absent.sock", "--", sys.executable, "-c", "print('ran')"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    assert proc.stderr.count("warning") == 1
    other = subprocess.run([client_venv / "grouper", "order"], capture_output=True, text=True)
    assert other.returncode == 2 and "invalid choice" in other.stderr


def test_client_run_bad_input_is_one_line_exit_2(client_venv, tmp_path):
    proc = subprocess.run(
        [client_venv / "grouper", "run", "--cojob", "c", "--job", "j", "--stages", "5,x",
         "--", "true"],
        cwd=tmp_path, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == "grouper: error: --stages[1]: expected an integer, got 'x'\n"


def test_client_with_an_old_protobuf_warns_once_and_training_goes_on(wheels, tmp_path):
    """The stubs refuse protobuf 6 at import (a VersionError): one warning, no raise."""
    venv = tmp_path / "old"
    bin_ = make_venv(venv, "client.txt", wheels["client"], extra=(OLD_PROTOBUF,))
    sock = tmp_path / "agent.sock"
    sock.touch()  # a socket path is there, so the client gets as far as the stubs
    done, warned, message = train(bin_ / "python", sock, tmp_path)
    assert (done, warned) == (6, 1) and "VersionError" in message, message


def test_client_with_stubs_missing_warns_once_and_training_goes_on(client_venv, tmp_path):
    site = next((client_venv.parent / "lib").glob("python3*/site-packages"))
    stub = site / "grouper" / "v1" / "agent_pb2_grpc.py"
    saved = stub.read_bytes()
    sock = tmp_path / "agent.sock"
    sock.touch()
    try:
        stub.unlink()
        done, warned, message = train(client_venv / "python", sock, tmp_path)
    finally:
        stub.write_bytes(saved)
    assert (done, warned) == (6, 1) and "ImportError" in message, message


def test_client_on_a_full_disk_keeps_training(client_venv, tmp_path):
    """Standard error on a full device (/dev/full: every write fails with ENOSPC): the
    client's warning cannot be written, and training still goes on."""
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [client_venv / "python", "-c", TRAIN.replace("SOCKET", repr(str(tmp_path / "x")))],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=full, text=True, timeout=60,
        )  # fmt: skip
    assert proc.returncode == 0
    assert proc.stdout.split()[:2] == ["6", "1"]
