"""One more reading of Wang et al.'s Algorithm 3 tried against Table V: an all-reduce
that is refused reserves its servers, so no lower-priority all-reduce starts there
before it (no backfilling). builtin:wang-64gpu, LWF-1; prints each scheduler's
average JCT, GPU utilisation and shared starts (its figures:
``git show 696dd6f^:docs/job-scheduling.md``)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from grouper.simulator.jobs.engine import Simulation
from grouper.simulator.jobs.placement import parse_placement
from grouper.simulator.jobs.schedulers import parse_scheduler
from grouper.workloads.jobmix import wang_64gpu


class Reserving(Simulation):
    """Every waiting all-reduce is reconsidered in SRSF order; a refused one blocks its
    servers for those after it."""

    def admit_comm(self) -> None:
        self.comm_ready += self.comm_new
        self.comm_new, self.freed = [], set()
        self.comm_ready.sort(key=lambda j: (j.remaining, j.id))
        blocked: set[int] = set()
        started = []
        for job in list(self.comm_ready):
            loads = [len(self.server_comm[s]) for s in job.servers]
            if blocked.isdisjoint(job.servers) and self.scheduler.admit(
                job.bytes, loads, lambda job=job: self.remaining_bytes(job), self.model
            ):
                self.start_comm(job)
                started.append(job)
            else:
                blocked.update(job.servers)
        for job in started:
            self.comm_ready.remove(job)


def run(scheduler: str) -> tuple:
    sim = Reserving(wang_64gpu(), parse_placement("lwf:1"), parse_scheduler(scheduler))
    s = sim.run().summary
    return (
        scheduler,
        round(s["avg_jct"], 1),
        round(s["avg_gpu_utilization"], 4),
        s["all_reduces_shared"],
    )


if __name__ == "__main__":
    with ProcessPoolExecutor(2) as pool:
        for row in pool.map(run, ["srsf:1", "srsf:2", "ada-srsf"]):
            print(row)
