"""What a caller may name in the registry: its own processes, its own cgroup, its own
jobs, a weight within the policy, and no more than its share of the agent.

Root may name any process, cgroup and job and is held to none of the per-user limits.
Every refusal is a :class:`Refusal` naming the field and the rule, with a ``reason``
the agent counts in its metrics. The checks run before the registry changes anything,
so a refused call changes nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

from grouper.agent.peers import Caller
from grouper.common.errors import ConfigError
from grouper.common.registration import JobEntry
from grouper.common.registry_policy import RegistryPolicy

REASONS = (
    "another_users_process",
    "another_users_job",
    "cgroup",
    "own_cgroup",
    "weight",
    "jobs_per_user",
    "pids_per_job",
    "rate",
)


class Refusal(ConfigError):
    """A call refused by an ownership rule or a per-user limit."""

    def __init__(self, path: str, problem: str, reason: str) -> None:
        super().__init__(path, problem)
        self.reason = reason


def process_uid(pid: int) -> int | None:
    """The real uid of process ``pid`` (None if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("Uid:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_cgroup(pid: int) -> str | None:
    """The cgroup v2 path of process ``pid`` ("/a/b"), or None."""
    try:
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:].strip() or "/"
    except OSError:
        pass
    return None


def check_job(old: JobEntry | None, caller: Caller) -> None:
    """A job key belongs to the uid that registered it, until the job leaves."""
    if old is not None and old.owner != caller.uid and not caller.root:
        raise Refusal(
            "job_id",
            f"job {old.cojob_id}/{old.job_id} is another user's (uid {old.owner})",
            "another_users_job",
        )


def check_register(
    entry: JobEntry, caller: Caller, policy: RegistryPolicy, held: int, admin: int | None
) -> None:
    """A registration's weight, pids and cgroup against the caller; ``held``: the
    caller's active jobs, were this one new (0 when it joins a job of its own)."""
    if caller.root:
        return
    privileged = admin is not None and (admin == caller.gid or admin in caller.groups)
    if entry.weight > policy.max_weight and not privileged:
        raise Refusal(
            "weight",
            f"{entry.weight:g} is above {policy.max_weight:g}, the most an ordinary user's "
            "job may have (agent.registry.max_weight)",
            "weight",
        )
    if held >= policy.max_jobs_per_user:
        raise Refusal(
            "job_id",
            f"uid {caller.uid} holds {held} jobs here, the most agent.registry."
            "max_jobs_per_user allows",
            "jobs_per_user",
        )
    for i, (pid, _) in enumerate(entry.pids):
        uid = process_uid(pid)
        if uid is not None and uid != caller.uid:
            raise Refusal(
                f"pids[{i}]", f"process {pid} belongs to another user", "another_users_process"
            )
    if entry.own_cgroup:
        raise Refusal(
            "own_cgroup",
            "only root's jobs get a cgroup of the agent's (it would take the processes out "
            "of the limits of the cgroup they are in): known by pids instead",
            "own_cgroup",
        )
    if entry.cgroup:
        _check_cgroup(entry.cgroup, caller)


def _check_cgroup(cgroup: str, caller: Caller) -> None:
    """An ordinary user's job names the cgroup its caller runs in, or one above it
    (``--cgroup self``, a Slurm step's, a pod's)."""
    mine = process_cgroup(caller.pid) if caller.pid else None
    if mine is None or not (mine + "/").startswith(cgroup.rstrip("/") + "/"):
        where = f"the caller's is {mine[:80]!r}" if mine else "the caller has none"
        raise Refusal("cgroup", f"must contain the calling process ({where})", "cgroup")


def check_pids_count(count: int, caller: Caller, policy: RegistryPolicy) -> None:
    if count > policy.max_pids_per_job and not caller.root:
        raise Refusal(
            "pids",
            f"{count} processes in one job, more than agent.registry.max_pids_per_job "
            f"({policy.max_pids_per_job})",
            "pids_per_job",
        )


class RateLimit:
    """Calls per second per uid: a token bucket holding a second's worth of calls."""

    def __init__(self, per_second: float, clock=time.monotonic) -> None:  # noqa: ANN001
        self.rate = per_second
        self.clock = clock
        self._buckets: dict[int, tuple[float, float]] = {}  # uid -> (tokens, at)

    def take(self, caller: Caller) -> None:
        if caller.root:
            return
        now = self.clock()
        tokens, at = self._buckets.get(caller.uid, (self.rate, now))
        tokens = min(self.rate, tokens + (now - at) * self.rate)
        if tokens < 1:
            self._buckets[caller.uid] = (tokens, now)
            raise Refusal(
                "caller",
                f"uid {caller.uid} called more than {self.rate:g} times a second "
                "(agent.registry.calls_per_second)",
                "rate",
            )
        self._buckets[caller.uid] = (tokens - 1, now)
        if len(self._buckets) > 100_000:  # one entry per uid: bounded by the users
            self._buckets.clear()
