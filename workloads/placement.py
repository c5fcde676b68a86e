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
* ``sjf-bco`` (``sjf-bco:K``): after Yu et al. (Algorithms 1-3): a job of at most K
  participants (default 4) is packed into servers already in use (FA-FFP), a larger one
  goes to the least busy servers by average slot workload (LBSGF). This is
  :class:`SjfBco` with ``fragments="by-server"`` and lambda 1. There is no bisection
  over an execution-time bound here: placement is static, jobs have no planned times.

:class:`SjfBco` is the one SJF-BCO GPU choice, also used by the job-level planner
(``simulator/jobs/sjfbco.py``, with the bisection and the kappa sweep). Its callers
differ, each keeping its own results:

* FA-FFP's order of fragments is a named option. ``by-gpu`` (the planner): the GPUs of
  servers in use come first, the least busy GPU first across all of them. ``by-server``
  (``sjf-bco`` here): the servers in use one at a time, least busy server (average slot
  workload) first, then the unused servers in index order; in each server the least busy
  slot first. LBSGF fills its servers one at a time for both.
* What the callers pass in: the planner's busy measure is when a GPU is next free, its
  candidates are the GPUs that fit the bound (for FA-FFP: those free earliest), a server
  is in use when one of its GPUs is busy, and lambda comes from the workload. Here it is
  the workload given to a slot so far, every slot is a candidate, a server is in use
  once a job has a slot on it, and lambda is 1 (no effect when every slot may be taken).
  A job with more participants than slots takes the choice again, in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grouper.common.errors import ConfigError

PLACEMENTS = ("random", "first-fit", "list", "lwf", "sjf-bco")
FRAGMENTS = ("by-gpu", "by-server")  # FA-FFP's order of fragments, see SjfBco


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
        self.bco = SjfBco(np.full(hosts, slots), fragments="by-server")

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
            picked = self._sjf_bco(n)
            hosts, slots = (picked // self.slots).tolist(), (picked % self.slots).tolist()
        for h, s in zip(hosts, slots, strict=True):
            self.load[h, s] += work
            self.used[h, s] += 1
        return hosts

    def _sjf_bco(self, n: int) -> np.ndarray:
        """SJF-BCO's slots (FA-FFP up to ``kappa`` participants, else LBSGF), as flat slot
        indices; more participants than slots take the same order again."""
        every = np.arange(self.hosts * self.slots)
        take, load, server_busy = min(n, len(every)), self.load.ravel(), self.load.mean(1)
        if n <= self.kappa:
            picked = self.bco.fa_ffp(take, load, every, self.used.sum(1) > 0, server_busy)
        else:
            picked = self.bco.lbsgf(take, load, every, server_busy)
        assert picked is not None  # every slot is a candidate
        return np.resize(picked, n)

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


class SjfBco:
    """SJF-BCO's GPU choices (Yu et al. 2022, Algorithms 2 and 3) on servers of ``caps``
    GPUs each, GPUs numbered server by server. Every choice gets ``busy`` (a measure per
    GPU, least busy taken first) and ``cand`` (the GPUs that may take the job, ascending)
    and returns ``n`` of them in the order taken (ties: lower index first), or None when
    ``cand`` holds fewer than ``n``. ``fragments`` orders FA-FFP's fragments (see the
    module docstring): ``by-gpu`` or ``by-server``."""

    def __init__(
        self, caps: Sequence[int] | np.ndarray, lam: float = 1.0, fragments: str = "by-gpu"
    ) -> None:
        if fragments not in FRAGMENTS:
            raise ValueError(f"fragments must be one of {FRAGMENTS}, got {fragments!r}")
        self.caps = np.asarray(caps)
        self.server_of = np.repeat(np.arange(len(self.caps)), self.caps)
        self.lam, self.fragments = lam, fragments

    def fa_ffp(
        self,
        n: int,
        busy: np.ndarray,
        cand: np.ndarray,
        opened: np.ndarray,
        server_busy: np.ndarray | None = None,
    ) -> np.ndarray | None:
        """FA-FFP (Algorithm 2), fragments first: GPUs on the servers in use (``opened``)
        before the others. ``by-server`` also needs each server's ``server_busy``."""
        if self.fragments == "by-gpu":
            return self._take(n, busy, cand, (~opened).astype(np.int64))
        if server_busy is None:
            raise ValueError("FA-FFP by server needs each server's busy measure")
        open_ = np.flatnonzero(opened)
        order = np.r_[open_[np.argsort(server_busy[open_], kind="stable")], np.flatnonzero(~opened)]
        return self._take(n, busy, cand, _ranks(order))

    def lbsgf(
        self, n: int, busy: np.ndarray, cand: np.ndarray, server_busy: np.ndarray
    ) -> np.ndarray | None:
        """LBSGF (Algorithm 3): the least busy servers by ``server_busy``, as many as hold
        ``lam n`` GPUs, filled one server at a time, each server's least busy GPU first
        (G_idle built server by server, its first ``n`` GPUs taken, lines 4-7)."""
        by_busy = np.argsort(server_busy, kind="stable")
        m = int(np.searchsorted(np.cumsum(self.caps[by_busy]), self.lam * n)) + 1
        rank = _ranks(by_busy)
        return self._take(n, busy, cand[rank[self.server_of[cand]] < m], rank)

    def _take(
        self, n: int, busy: np.ndarray, cand: np.ndarray, rank: np.ndarray
    ) -> np.ndarray | None:
        """The first ``n`` of ``cand`` by their server's ``rank``, then ``busy``, then index."""
        if len(cand) < n:
            return None
        key = np.lexsort((cand, busy[cand], rank[self.server_of[cand]]))
        return cand[key[:n]]


def _ranks(order: np.ndarray) -> np.ndarray:
    """Each server's place in ``order`` (a permutation of the servers)."""
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order))
    return rank
