"""A real Slurm cluster on one machine: munged, slurmctld and one slurmd per node, each
node's slurmd in that node's network namespace.

Debian builds slurmd for several daemons on one host (``slurmd -N n1``, each node with
a ``Port=`` of its own). The daemons run in the foreground as our children (``-D``,
``-F``), so they are ended by the pid we started; everything they write (state, spool,
logs, pid files, munge's socket and key) lies in one folder.

Process tracking is ``proctrack/linuxproc`` (by parent pid) by default: Slurm's
``cgroup/v2`` plugin refuses a host whose cgroups are hybrid, as this machine's are.
With ``cgroup_v2`` (a pure cgroup2 host: the stock-kernel VM) it is ``proctrack/cgroup``
and ``task/cgroup`` over ``CgroupPlugin=cgroup/v2`` (``CGROUP_V2_CONF``). slurmd enters
its node's namespace with ``nsenter --net`` (``ip netns exec`` remounts ``/sys`` and
slurmd then finds no cgroup filesystem: "Unable to initialize cgroup plugin").
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from grouper.agent.cgroups import Cgroups, cgroup2_mount
from tests.netns import TIME_SCALE

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "srun", "sbatch", "scontrol", "sinfo")
CTLD_PORT = 16817
FIRST_NODE_PORT = 17001


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


@dataclass(frozen=True)
class Node:
    name: str  # Slurm's NodeName
    netns: str  # the network namespace its slurmd (and so its tasks) run in
    address: str


# cgroup.conf beside slurm.conf for the cgroup/v2 plugin: no systemd to ask for the
# slurmstepd scope (slurmd makes it), nothing constrained (grouper needs only the
# step's cgroup)
CGROUP_V2_CONF = """CgroupPlugin=cgroup/v2
IgnoreSystemd=yes
ConstrainCores=no
ConstrainRAMSpace=no
ConstrainDevices=no
"""


def slurm_conf(top: Path, controller: str, nodes: list[Node], cgroup_v2: bool = False) -> str:
    """The slurm.conf of the test cluster: the lines that matter for grouper are
    ProctrackType (how a step's processes are known) and TaskPlugin."""
    tracking = ["ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup"] if cgroup_v2 else [
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none"]  # fmt: skip
    lines = [
        "ClusterName=grouper-test",
        f"SlurmctldHost={socket.gethostname()}({controller})",
        f"SlurmctldPort={CTLD_PORT}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={top}/munge/munge.socket",
        f"StateSaveLocation={top}/state",
        f"SlurmdSpoolDir={top}/spool/%n",
        f"SlurmctldPidFile={top}/run/slurmctld.pid",
        f"SlurmdPidFile={top}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={top}/log/slurmctld.log",
        f"SlurmdLogFile={top}/log/slurmd-%n.log",
        *tracking,
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "MpiDefault=none",
        "SwitchType=switch/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "SlurmdTimeout=30",
        "InactiveLimit=0",
        "KillWait=5",
        "MinJobAge=10",
        # the nodes' CPUs as written below, whatever this machine has: two jobs' tasks
        # share a node even on a 2-core machine
        "SlurmdParameters=config_overrides",
    ]
    for i, n in enumerate(nodes):
        lines.append(
            f"NodeName={n.name} NodeHostname={socket.gethostname()} NodeAddr={n.address} "
            f"Port={FIRST_NODE_PORT + i} CPUs=4 RealMemory=1000 State=UNKNOWN"
        )
    lines.append(f"PartitionName=test Nodes={','.join(n.name for n in nodes)} Default=YES "
                 "MaxTime=INFINITE State=UP")  # fmt: skip
    return "\n".join(lines) + "\n"


class SlurmCluster:
    """munged, slurmctld (in ``controller_ns``) and a slurmd per node, all in ``top``."""

    def __init__(
        self, top: Path, controller_ns: str, controller: str, nodes: list[Node],
        cgroup_v2: bool = False,
    ):  # fmt: skip
        self.top, self.nodes = top, nodes
        self.controller_ns = controller_ns
        self.conf = top / "slurm.conf"
        self.procs: list[subprocess.Popen] = []
        self.slurmd: dict[str, subprocess.Popen] = {}  # node -> its slurmd
        for d in ("munge", "state", "log", "run", *(f"spool/{n.name}" for n in nodes)):
            (top / d).mkdir(parents=True, exist_ok=True)
        (top / "munge").chmod(0o755)  # users' srun reach munged's socket
        top.chmod(0o755)
        self.conf.write_text(slurm_conf(top, controller, nodes, cgroup_v2))
        if cgroup_v2:
            (top / "cgroup.conf").write_text(CGROUP_V2_CONF)
            (top / "cgroup.conf").chmod(0o644)
        self.conf.chmod(0o644)
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        # cgroup/v2 without systemd: slurmd makes its scope in /system.slice, which
        # systemd would have made; made here when absent, and removed with what is in it
        self.cgroups: list[str] = []  # cgroups we made or slurmd made for us
        if cgroup_v2:
            mount = cgroup2_mount()
            assert mount, "cgroup_v2: no cgroup2 mount"
            self.cgroup_tree = Cgroups(mount)
            if not Path(mount, "system.slice").is_dir():
                Path(mount, "system.slice").mkdir()
                self.cgroups.append("/system.slice")
            else:
                self.cgroups += [f"/system.slice/{n.name}_slurmstepd.scope" for n in nodes]

    def start(self) -> SlurmCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        m = self.top / "munge"
        subprocess.run(["mungekey", "--create", f"--keyfile={m}/munge.key"], check=True)
        self._spawn(None, "munged", "-F", f"--socket={m}/munge.socket",
                    f"--key-file={m}/munge.key", f"--pid-file={m}/munged.pid",
                    f"--log-file={m}/munged.log", f"--seed-file={m}/munged.seed")  # fmt: skip
        self._wait(lambda: self._ok("munge", "-n", "-S", f"{m}/munge.socket"), "munged")
        self._spawn(self.controller_ns, "slurmctld", "-D", "-f", str(self.conf))
        self._wait(lambda: b"is UP" in self._out("scontrol", "ping"), "slurmctld")
        for n in self.nodes:
            self.slurmd[n.name] = self._spawn(n.netns, "slurmd", "-D", "-f", str(self.conf),
                                              "-N", n.name)  # fmt: skip
        self._wait(lambda: self.idle_nodes() == len(self.nodes), "every node idle")

    def _spawn(self, ns: str | None, *argv: str) -> subprocess.Popen:
        enter = ["nsenter", f"--net=/var/run/netns/{ns}"] if ns else []
        log = (self.top / "log" / f"{argv[0]}-{len(self.procs)}.out").open("w")
        proc = subprocess.Popen([*enter, *argv], env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def restart_slurmd(self, name: str) -> None:
        """End node ``name``'s slurmd (SIGTERM, as ``systemctl restart slurmd`` does) and
        start it again; its running steps' slurmstepd are not its children and go on.
        Returns once the controller has the new daemon's registration (the node's
        ``SlurmdStartTime`` changes)."""
        started = self.slurmd_start_time(name)
        old = self.slurmd[name]
        old.send_signal(signal.SIGTERM)
        old.wait(timeout=15 * TIME_SCALE)
        self.procs.remove(old)
        time.sleep(1.1)  # SlurmdStartTime counts seconds
        node = next(n for n in self.nodes if n.name == name)
        self.slurmd[name] = self._spawn(node.netns, "slurmd", "-D", "-f", str(self.conf),
                                        "-N", name)  # fmt: skip
        self._wait(lambda: self.slurmd_start_time(name) != started, f"{name}'s new slurmd")

    def slurmd_start_time(self, name: str) -> str:
        """When the controller last heard a slurmd of node ``name`` start."""
        text = self._out("scontrol", "show", "node", name).decode()
        return next((w for w in text.split() if w.startswith("SlurmdStartTime=")), "")

    def _out(self, *argv: str) -> bytes:
        """A client command's output, run in the controller's namespace."""
        enter = ["nsenter", f"--net=/var/run/netns/{self.controller_ns}"]
        r = subprocess.run([*enter, *argv], env=self.env, capture_output=True, timeout=30)
        return r.stdout

    def as_user(self, user: list[str], *argv: str, cwd: Path) -> str:
        """A client command (``sbatch``, ``scancel``) run by a user on the head node:
        ``user`` is the argv prefix that becomes them (``setpriv ...``)."""
        enter = ["nsenter", f"--net=/var/run/netns/{self.controller_ns}"]
        r = subprocess.run([*enter, *user, *argv], env=self.env, capture_output=True,
                           text=True, timeout=30, cwd=cwd)  # fmt: skip
        assert r.returncode == 0, f"{argv[0]}: {r.stderr.strip()}"
        return r.stdout

    def states(self) -> dict[str, str]:
        """job id -> its state and, pending, the reason (``squeue``'s %t and %r)."""
        rows = self._out("squeue", "-h", "-o", "%i %t %r").decode().splitlines()
        return {r.split()[0]: " ".join(r.split()[1:]) for r in rows if r.strip()}

    def queue(self) -> list[str]:
        """The ids of the jobs the controller still holds (pending, running, ending)."""
        return [j.decode() for j in self._out("squeue", "-h", "-o", "%i").split()]

    def _ok(self, *argv: str) -> bool:
        return subprocess.run(argv, env=self.env, capture_output=True).returncode == 0

    def idle_nodes(self) -> int:
        return self._out("sinfo", "-h", "-N", "-o", "%t").split().count(b"idle")

    def _wait(self, cond, what: str, timeout: float = 30.0) -> None:  # noqa: ANN001
        deadline = time.monotonic() + timeout * TIME_SCALE
        while not cond():
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[-1]} exited waiting for {what}: {self.logs()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")
            time.sleep(0.1)

    def logs(self) -> str:
        return " | ".join(
            f"{p.name}: {p.read_text(errors='replace')[-600:]}"
            for p in sorted((self.top / "log").glob("*"))
        )

    def cancel_all(self, timeout: float = 20.0) -> None:
        """Cancel every job and wait until the controller holds none: a step's processes
        are slurmstepd's, not ours, and end only through Slurm."""
        if jobs := self.queue():
            self._out("scancel", *jobs)
        deadline = time.monotonic() + timeout * TIME_SCALE
        while self.queue() and time.monotonic() < deadline:
            time.sleep(0.2)

    def stop(self) -> None:
        """Every job, then every daemon we started, newest first (slurmds, slurmctld,
        munged), by pid."""
        if len(self.procs) > 1 and self.procs[1].poll() is None:
            self.cancel_all()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        for path in self.cgroups:
            self.cgroup_tree.remove_tree(path)
