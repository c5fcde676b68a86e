"""Which hosts a job's participants use. Decided when a workload is generated.

Each host has ``slots`` GPU slots; a job needs one slot per participant (worker or
parameter server). ``workload`` per slot is the compute the slot has been given so far
(iterations x compute time), as in LWF-kappa. Placement is static: slots are not
freed when jobs end (documented limitation: the generators spread cojobs over time).

* ``random``: distinct hosts drawn at random.
* ``first-fit``: the first slots in host order that have the least use count.
* ``list``: list scheduling, the slots with the least workload.
* ``lwf:K``: LWF-kappa (Wang et al., Algorithm 1): a job of at most K participants is
  placed like ``list``; a larger one takes the least loaded servers and fills them
  server by server, consolidating its participants.
* ``sjf-bco``: after Yu et al. (Algorithms 1-3): small jobs (at most K=4 participants)
  are packed first-fit into servers already in use (FA-FFP), larger ones go to the least
  busy servers by average slot workload (LBSGF). The bisection over the execution-time
  bound is not implemented (the extracted listing is unreadable there).
"""

from __future__ import annotations

import numpy as np
from grouper.common.errors import ConfigError

PLACEMENTS = ("random", "first-fit", "list", "lwf", "sjf-bco")


class Placer:
    def __init__(self, hosts: int, slots: int, spec: str, seed: int = 0) -> None:
        kind, _, arg = spec.partition(":")
        if kind not in PLACEMENTS:
            raise ConfigError(
                "placement", f"must be one of random, first-fit, list, lwf:K, sjf-bco; got {spec!r}"
            )
        self.kind = kind
        self.kappa = int(arg) if arg.isdigit() else 4
        self.hosts, self.slots = hosts, slots
        self.load = np.zeros((hosts, slots))  # workload per slot
        self.used = np.zeros((hosts, slots), dtype=np.int64)  # jobs placed per slot
        self.rng = np.random.default_rng(seed)

    def place(self, n: int, work: float) -> list[int]:
        """Hosts of ``n`` participants of a job with per-participant ``work``."""
        if self.kind == "random":
            hosts = self.rng.choice(self.hosts, size=n, replace=n > self.hosts).tolist()
            slots = [int(np.argmin(self.load[h])) for h in hosts]
        elif self.kind == "first-fit":
            order = np.lexsort((np.arange(self.hosts * self.slots), self.used.ravel()))
            picked = order[:n]
            hosts, slots = (picked // self.slots).tolist(), (picked % self.slots).tolist()
        elif self.kind in ("list", "lwf"):
            kappa = self.kappa if self.kind == "lwf" else n
            free = np.ones(self.hosts * self.slots, dtype=bool)
            picked = lwf_kappa(n, kappa, self.load.ravel(), free, self.slots)
            if picked is None:  # more participants than slots: slots are reused
                hosts, slots = self._by_server(n, np.argsort(self.load.sum(1), kind="stable"))
            else:
                hosts, slots = (picked // self.slots).tolist(), (picked % self.slots).tolist()
        else:  # sjf-bco
            if n <= self.kappa and self.used.any():
                open_ = np.flatnonzero(self.used.sum(1) > 0)
                busy = self.load[open_].mean(1)
                rest = np.setdiff1d(np.arange(self.hosts), open_)
                order = np.r_[open_[np.argsort(busy, kind="stable")], rest]
            else:
                order = np.argsort(self.load.mean(1), kind="stable")
            hosts, slots = self._by_server(n, order)
        for h, s in zip(hosts, slots, strict=True):
            self.load[h, s] += work
            self.used[h, s] += 1
        return hosts

    def _by_server(self, n: int, order: np.ndarray) -> tuple[list[int], list[int]]:
        hosts: list[int] = []
        slots: list[int] = []
        while len(hosts) < n:
            for h in order:
                for s in np.argsort(self.load[h], kind="stable"):
                    hosts.append(int(h))
                    slots.append(int(s))
                    if len(hosts) == n:
                        return hosts, slots
        return hosts, slots


def least_loaded(n: int, load: np.ndarray, free: np.ndarray) -> np.ndarray | None:
    """List scheduling (LS): the ``n`` free GPUs with the least ``load`` (ties: lower
    index first), or None when fewer than ``n`` are free."""
    idx = np.flatnonzero(free)
    if len(idx) < n:
        return None
    return idx[np.argsort(load[idx], kind="stable")[:n]]


def first_fit(n: int, free: np.ndarray) -> np.ndarray | None:
    """First-Fit (FF): the first ``n`` free GPUs in cluster order."""
    idx = np.flatnonzero(free)
    return idx[:n] if len(idx) >= n else None


def lwf_kappa(
    n: int, kappa: int, load: np.ndarray, free: np.ndarray, per_server: int
) -> np.ndarray | None:
    """LWF-kappa (Wang et al., Algorithm 1). ``load`` is each GPU's remaining workload,
    ``free`` whether it can take the job (memory). A job of at most ``kappa`` GPUs takes
    the least loaded GPUs anywhere (as LS); a larger one goes through the servers by
    their total workload (least first) and takes each server's free GPUs, least loaded
    first, until it has ``n``: it is consolidated on the fewest lightly loaded servers."""
    if n <= kappa:
        return least_loaded(n, load, free)
    if int(free.sum()) < n:
        return None
    servers = len(load) // per_server
    by_server = np.argsort(load.reshape(servers, per_server).sum(1), kind="stable")
    picked: list[int] = []
    for s in by_server:
        base = int(s) * per_server
        own = np.flatnonzero(free[base : base + per_server])
        own = own[np.argsort(load[base + own], kind="stable")]
        picked.extend((base + own).tolist())
        if len(picked) >= n:
            break
    return np.asarray(picked[:n], dtype=np.int64)
