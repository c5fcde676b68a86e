"""Report a training job to the grouper agent on this host.

Needs only grpcio and protobuf (no numpy, no pyroute2), so any training environment can
import it::

    from grouper.client import Job

    with Job(cojob="resnet-search", job="trial-3", stages=[500, 1000, 2000]) as job:
        for stage in job.stages:
            for _ in range(stage):
                train_one_iteration()
                job.step()          # never blocks: reports are batched on a thread
            job.stage_done()        # optional when the loop ran the stage in full

Under ``grouper run`` the job is already registered and ``Job.from_env()`` takes its ids
from the environment. Whatever happens to the scheduler, training goes on: with no
agent socket the job is a no-op (one warning), a refusal is logged and kept in
``job.error``, and a failed report is retried with the next batch.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import warnings
from collections.abc import Sequence
from typing import Any

log = logging.getLogger("grouper.client")

DEFAULT_SOCKET = "/run/grouper/agent.sock"
ENV_SOCKET = "GROUPER_AGENT_SOCKET"
ENV_COJOB = "GROUPER_COJOB"
ENV_JOB = "GROUPER_JOB"
ENV_STAGES = "GROUPER_STAGES"
ENV_MANAGED = "GROUPER_MANAGED"  # "1": a launcher registered the job and will finish it
RPC_TIMEOUT = 2.0
_warned_absent = False


class Job:
    """One job's participant on this host. Thread-safe; ``step`` never waits on I/O."""

    def __init__(
        self,
        cojob: str,
        job: str,
        stages: Sequence[int],
        *,
        arch: str = "flows",
        model_bytes: float = 0.0,
        flows: Sequence[tuple[str, float]] = (),
        socket: str | None = None,
        report_every: float = 0.2,
        managed: bool = False,
        weight: float = 1.0,
        cgroup: str = "",
        own_cgroup: bool = False,
    ) -> None:
        """``flows``: (destination host or address, bytes per iteration) this process
        sends, when known in advance; otherwise the agent measures them. ``managed``: a
        launcher registered the job (and reports its end). ``weight``: the job's
        importance when the coordinator orders stages (a stage weighs as its heaviest
        job; default 1). ``cgroup``: the job's cgroup v2 path, when it has one of its own
        (a Slurm step's, a pod's); ``own_cgroup``: ask the agent to make one and move
        this process into it (``grouper run`` does)."""
        self.cojob, self.job = str(cojob), str(job)
        self.stages = [int(s) for s in stages]
        if not self.stages or min(self.stages) < 1:
            raise ValueError(f"stages: need positive iteration counts, got {list(stages)!r}")
        self.arch, self.model_bytes, self.flows = arch, float(model_bytes), list(flows)
        self.weight = float(weight)
        self.cgroup, self.own_cgroup = cgroup, own_cgroup
        self.socket = socket or os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET
        self.report_every = report_every
        self.managed = managed
        self.error = ""  # the agent's refusal, if any
        self.active = False  # registered with a live agent
        self._lock = threading.Lock()
        self._sending = threading.Lock()
        self._done = 0
        self._stage = 0  # stages closed by stage_done()
        self._sent = 0
        self._wake = threading.Event()
        self._closed = threading.Event()
        self._begun = False  # start() ran (explicitly, by `with`, or by the first step)
        self._thread: threading.Thread | None = None
        self._channel: Any = None
        self._stub: Any = None

    @classmethod
    def from_env(cls, **kw: Any) -> Job:
        """The job ``grouper run`` registered: ids and stages from its environment."""
        env = os.environ
        missing = [k for k in (ENV_COJOB, ENV_JOB, ENV_STAGES) if not env.get(k)]
        if missing:
            raise RuntimeError(f"{missing[0]}: not set (start the job with `grouper run`)")
        try:
            stages = [int(x) for x in env[ENV_STAGES].split(",")]
        except ValueError:
            raise RuntimeError(
                f"{ENV_STAGES}: expected iterations per stage like 500,1000, "
                f"got {env[ENV_STAGES][:40]!r}"
            ) from None
        kw.setdefault("managed", env.get(ENV_MANAGED) == "1")
        return cls(env[ENV_COJOB], env[ENV_JOB], stages, **kw)

    # -- lifecycle -------------------------------------------------------------------
    def __enter__(self) -> Job:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Register with the agent (unless a launcher did) and report from a thread.
        Called by ``with``, or by the first ``step()``; progress is flushed at
        interpreter exit if ``close()`` never runs."""
        if self._begun or self._closed.is_set():
            return
        self._begun = True
        try:
            if not self._connect():
                return
            if not self.managed and not self._call("RegisterJob", self._registration()):
                return
        except Exception as exc:  # whatever it is, training goes on
            _warn_once(
                f"grouper: cannot reach the agent ({_brief(exc)}); training runs unscheduled"
            )
            return
        self.active = True
        self._thread = threading.Thread(target=self._reporter, name="grouper-report", daemon=True)
        self._thread.start()
        atexit.register(self.close)  # the last progress and the job's end are not lost

    def close(self) -> None:
        """Flush progress; unless a launcher manages the job, report this participant done."""
        if self._closed.is_set():
            return
        self._closed.set()
        atexit.unregister(self.close)
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=RPC_TIMEOUT * 2)
        if self.active:
            self._flush()
            if not self.managed and not self.cgroup:  # a cgroup's job ends with the cgroup
                self._call(
                    "JobFinished",
                    self._pb.JobFinishedReport(
                        cojob_id=self.cojob, job_id=self.job, pids=[os.getpid()]
                    ),
                )
        if self._channel is not None:
            self._channel.close()
        self.active = False

    def declare(
        self,
        flows: Sequence[tuple[str, float]] = (),
        *,
        arch: str | None = None,
        model_bytes: float | None = None,
    ) -> bool:
        """Tell the agent the job's load once it is known (e.g. from the process group):
        bytes per iteration to each destination host or address. The agent uses these
        until it has measured the job itself. Returns whether the agent accepted."""
        self.flows = list(flows)
        if arch is not None:
            self.arch = arch
        if model_bytes is not None:
            self.model_bytes = float(model_bytes)
        if not self.active:
            return False
        msg = self._registration()
        if self.managed:
            del msg.pids[:]  # the launcher's pid already covers this process
        return self._call("RegisterJob", msg)

    # -- training loop ---------------------------------------------------------------
    @property
    def total(self) -> int:
        return sum(self.stages)

    @property
    def iterations_done(self) -> int:
        return self._done

    def step(self, n: int = 1) -> None:
        """``n`` more iterations done (reported within ``report_every``). The first
        call starts the job if nothing did."""
        if not self._begun:
            self.start()
        with self._lock:
            self._done = min(self.total, self._done + n)

    def flush(self) -> bool:
        """Send the progress now, from the calling thread (one call to the agent, at
        most ``RPC_TIMEOUT``); whether the agent has it."""
        if not self.active:
            return False
        self._flush()
        return self._sent >= self._done

    def stage_done(self) -> None:
        """The current stage is over (its iterations count as done even if cut short)."""
        if not self._begun:
            self.start()
        with self._lock:
            if self._stage < len(self.stages):
                self._stage += 1
                self._done = max(self._done, sum(self.stages[: self._stage]))
        self._wake.set()

    # -- plumbing --------------------------------------------------------------------
    def _connect(self) -> bool:
        if not os.path.exists(self.socket):
            _warn_once(f"grouper: no agent socket at {self.socket}; training runs unscheduled")
            return False
        # an old or mismatched protobuf or grpcio refuses the generated stubs here (an
        # ImportError, or protobuf's VersionError): start() turns it into one warning
        import grpc

        from grouper.v1 import agent_pb2, agent_pb2_grpc

        self._pb = agent_pb2
        self._channel = grpc.insecure_channel(f"unix:{self.socket}")
        self._stub = agent_pb2_grpc.RegistryStub(self._channel)
        return True

    def _registration(self) -> Any:
        pb = self._pb
        return pb.JobRegistration(
            cojob_id=self.cojob,
            job_id=self.job,
            arch=self.arch,
            stage_iterations=self.stages,
            model_bytes=self.model_bytes,
            flows=[pb.FlowSpec(dst_host=h, bytes_per_iteration=b) for h, b in self.flows],
            # a job in a cgroup of its own is known by it: no pid, which in a container
            # would be of the container's pid namespace, not the agent's
            pids=[] if self.cgroup else [os.getpid()],
            weight=self.weight,
            cgroup=self.cgroup,
            own_cgroup=self.own_cgroup,
        )

    def _call(self, method: str, msg: Any) -> bool:
        """One RPC; a refusal or an unreachable agent is logged, never raised."""
        import grpc

        try:
            ack = getattr(self._stub, method)(msg, timeout=RPC_TIMEOUT)
        except grpc.RpcError as exc:
            denied = _permission_denied(self.socket)
            if denied:
                log.warning("grouper agent: %s (%s)", denied, method)
            else:
                log.warning("grouper agent unreachable (%s): %s", method, exc.code().name)
            return False
        except Exception as exc:  # never into the training loop
            log.warning("grouper: %s failed: %s", method, _brief(exc))
            return False
        if not ack.ok:
            if not self.error:
                log.warning("grouper agent refused %s: %s", method, ack.error)
            self.error = ack.error
            return False
        return True

    def _flush(self) -> None:
        with self._sending:  # the reporter thread's and flush()'s, one at a time
            done = self._done
            if done > self._sent:
                msg = self._pb.ProgressReport(
                    cojob_id=self.cojob, job_id=self.job, iterations_done=done
                )
                if self._call("ReportProgress", msg):
                    self._sent = done

    def _reporter(self) -> None:
        while not self._closed.is_set():
            self._wake.wait(self.report_every)
            self._wake.clear()
            if not self._closed.is_set():
                try:
                    self._flush()
                except Exception as exc:  # a report lost, not the thread
                    log.warning("grouper: progress report failed: %s", _brief(exc))


def _brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return f"{type(exc).__name__}: {text[:160]}"


def _warn_once(message: str) -> None:
    """One warning per process, pointing at the training code that called start()."""
    global _warned_absent
    if not _warned_absent:
        _warned_absent = True
        warnings.warn(message, RuntimeWarning, stacklevel=4)


def _permission_denied(socket: str) -> str:
    """Why this process may not connect to the agent's socket, naming the group to
    join; "" when it may (the agent is then down, not closed to us)."""
    try:
        st = os.stat(socket)
    except OSError:
        return ""
    if os.access(socket, os.R_OK | os.W_OK):
        return ""
    import grp

    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return f"permission denied on {socket}: join the group {group!r} to register jobs"
