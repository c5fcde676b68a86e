"""Where the paper and the authors' simulator differ, one switch each (Wang et al. 2020
against github.com/HKBU-HPML/dl-scheduling, ``online/``; docs/explanation/job-scheduling.md).

Each rule is ``paper`` (the default: the paper's algorithms as we read them) or
``code`` (what the authors' simulator does):

* ``lwf-load``: the GPU load LWF-kappa balances. ``paper``: Algorithm 1's
  ``L_J = C_J x |G(J)|``, the remaining iterations x compute x GPUs of each job on the
  GPU. ``code``: the GPU's own remaining work, per GPU and without ``x |G|``: each
  job's remaining forward and backward passes on it plus, for a job on several servers,
  ``7.8125`` ms per MB per remaining all-reduce (``cluster.py`` ``gpu.add_job``,
  ``job_master.py`` line 270, decremented as tasks end).
* ``adadual-servers``: which running all-reduces AdaDUAL's Theorem 2 test is applied
  to. ``paper``: every one on the job's servers. ``code``: the one on the first of the
  job's servers that has one, servers in placement order (``job.py`` lines 122-128).
* ``srsf-key``: the SRSF order of the compute dispatch and the all-reduce queue.
  ``paper``: ``(C + E) x |G|`` per remaining iteration, E the all-reduce time once
  placed (Algorithm 3, line 1). ``code``: the remaining compute over all GPUs, lowered
  as each pass ends (``remain_compute_cumul_workload``, ``job_master.py`` 375, 415).
* ``tasks``: ``paper``: one compute task per iteration and GPU. ``code``: the forward
  and the backward pass are two tasks, and a GPU may switch jobs between them.

``--reference-poll`` adds the authors' artefact (not a rule of either): their AdaDUAL
check reads a running all-reduce's remaining size with ``get_rest_size()``, which adds
the bytes moved since the task's last rate update to its transferred count without
moving the time stamp; every waiting job checks every 1 ms slot, so each check moves
the all-reduce it checks one more slot forward (:mod:`simulator.jobs.reference_poll`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from grouper.common.errors import ConfigError

RULE_NAMES = ("lwf-load", "adadual-servers", "srsf-key", "tasks")
CHOICES = ("paper", "code")
# their placement's estimate of one all-reduce: 7.8125 ms per MB (1 / 0.128 MB/ms)
AUTHORS_LWF_COMM_S_PER_BYTE = 7.8125e-9


@dataclass(frozen=True)
class Rules:
    lwf_load: str = "paper"
    adadual_servers: str = "paper"
    srsf_key: str = "paper"
    tasks: str = "paper"
    reference_poll: bool = False
    slot: float = 1e-3  # seconds per check of the reference poll (their 1 ms slot)

    @property
    def name(self) -> str:
        chosen = [getattr(self, f.name) for f in fields(self)[:4]]
        if len(set(chosen)) == 1:
            text = chosen[0]
        else:
            text = ",".join(
                f"{n}={c}" for n, c in zip(RULE_NAMES, chosen, strict=True) if c != "paper"
            )
        return text + ("+poll" if self.reference_poll else "")


def parse_rules(spec: str | None, reference_poll: bool = False, path: str = "--rules") -> Rules:
    """``paper`` (default), ``code``, or ``RULE=paper|code`` items, comma-separated, over
    the paper's rules: ``lwf-load=code,srsf-key=code``."""
    values = dict.fromkeys(RULE_NAMES, "paper")
    for item in (spec or "paper").split(","):
        item = item.strip()
        if item in CHOICES:
            values = dict.fromkeys(RULE_NAMES, item)
            continue
        rule, sep, choice = item.partition("=")
        if not sep or rule not in RULE_NAMES or choice not in CHOICES:
            raise ConfigError(
                path,
                f"expected paper, code or RULE=paper|code with RULE one of "
                f"{', '.join(RULE_NAMES)}; got {item!r}",
            )
        values[rule] = choice
    return Rules(*values.values(), reference_poll=reference_poll)
