"""What the agent tells the coordinator on its session: numbered state updates.

The state is one :class:`pb.JobState` per job. An :class:`UpdateSource` remembers what it
last sent (the serialized state of each job), so an update carries only the jobs whose
state differs and the jobs that are gone. Updates of one agent process share an epoch
and are numbered from 1; a full update answers every sync and restarts the diff from
the whole state. With a progress ``step`` (the coordinator's sync sets it) a job whose
only change is iterations within one step of its stage is not a change
(``common.progress``); what is sent is always the job's state now. When the sync allows it
(``by_key``), a job whose registration is the one last sent goes in a delta as its key
and state without the registration: on a cluster nearly every job state in a period is
progress, and its registration is most of its bytes. Pure: the session loop
(``agent.session``) owns time and the stream.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from grouper.common.progress import reported_done
from grouper.v1 import agent_pb2 as pb

JobKey = tuple[str, str]


def new_epoch() -> int:
    """An incarnation id: random, so a restarted agent never reuses its predecessor's."""
    return random.SystemRandom().getrandbits(63) | 1


class UpdateSource:
    def __init__(self, host: str, epoch: int) -> None:
        self.host = host
        self.epoch = epoch
        self.seq = 0
        # per job, as last sent: its registration's bytes and its state's without it
        self.sent: dict[JobKey, tuple[bytes, bytes]] | None = None  # None until a sync
        self.header: tuple[int, bool] = (0, False)  # plan version and priorities, as sent
        self.step = 0.0  # progress reported in steps of this share of a stage (0: exact)
        self.by_key = False  # the coordinator takes known jobs' states without registration

    @property
    def synced(self) -> bool:
        return self.sent is not None

    def full(
        self, jobs: dict[JobKey, pb.JobState], plan_version: int, active: bool
    ) -> pb.StateUpdate:
        self.sent = {k: self._key(js)[:2] for k, js in jobs.items()}
        self.header = (plan_version, active)
        return self._update(True, [jobs[k] for k in sorted(jobs)], [], plan_version, active, ())

    def delta(
        self,
        jobs: dict[JobKey, pb.JobState],
        plan_version: int,
        active: bool,
        events: Iterable[pb.StageEvent] = (),
        *,
        heartbeat: bool = False,
    ) -> pb.StateUpdate | None:
        """The changes since the last update; None when there are none and neither
        events nor a heartbeat ask for one."""
        if self.sent is None:
            raise RuntimeError("delta before the first sync")
        changed, now, sent = [], {}, self.sent
        for k in sorted(jobs):
            reg, rest, bare = self._key(jobs[k])
            now[k] = pair = (reg, rest)
            last = sent.get(k)
            if last == pair:
                continue
            if self.by_key and last is not None and last[0] == reg:  # a registration held
                bare.key.cojob_id, bare.key.job_id = k
                changed.append(bare)
            else:
                changed.append(jobs[k])
        removed = [pb.JobKey(cojob_id=c, job_id=j) for c, j in sorted(sent.keys() - now)]
        events = list(events)
        header = (plan_version, active)
        if not changed and not removed and not events and not heartbeat and header == self.header:
            return None
        self.sent, self.header = now, header
        return self._update(False, changed, removed, plan_version, active, events)

    def _key(self, js: pb.JobState) -> tuple[bytes, bytes, pb.JobState]:
        """What a job's state is compared by: its registration's bytes and the bytes of
        the rest, with the iterations done as reported in steps; and that rest (the
        state now, without its registration)."""
        bare = pb.JobState()
        bare.CopyFrom(js)
        bare.ClearField("job")
        if self.step > 0:  # compared as reported in steps, sent as it is
            bare.iterations_done = reported_done(js.iterations_done, js.job.stage_iterations,
                                                 self.step)  # fmt: skip
        rest = bare.SerializeToString(deterministic=True)
        bare.iterations_done = js.iterations_done
        return js.job.SerializeToString(deterministic=True), rest, bare

    def _update(
        self,
        full: bool,
        jobs: list[pb.JobState],
        removed: list[pb.JobKey],
        plan_version: int,
        active: bool,
        events: Iterable[pb.StageEvent],
    ) -> pb.StateUpdate:
        self.seq += 1
        return pb.StateUpdate(
            host=self.host,
            epoch=self.epoch,
            seq=self.seq,
            full=full,
            jobs=jobs,
            removed=removed,
            plan_version=plan_version,
            priorities_active=active,
            events=events,
        )
