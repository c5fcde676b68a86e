"""PyTorch: count a DDP job's iterations and declare its ring, with one call.

::

    model = DistributedDataParallel(net)
    job = grouper.integrations.torch.attach(model)   # under `grouper run`
    for batch in data:                                 # the loop is unchanged
        loss_fn(model(batch)).backward(); opt.step()

``attach`` registers a DDP communication hook that does DDP's own all-reduce and counts
one iteration when the last gradient bucket of a backward pass has been reduced (its
future completed: counting at its start would end a stage while its last bytes are
still in flight, and they would then wait behind the next stage's priorities), so the
user's loop stays as it is. Before the first iteration it declares the job's load: the
gradient bytes (parameters that require grad) and the ring of the process group (each
rank's address, gathered over the group); with W ranks, ring all-reduce sends
2 (W-1) / W x gradient bytes per iteration from each rank to its successor. The agent
measures the real bytes later and those win (``docs/explanation/datapath.md``).
"""

from __future__ import annotations

import os
import socket
from typing import Any

import torch
import torch.distributed as dist

from grouper.client import Job


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of the gradients one backward pass produces (parameters requiring grad)."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def local_address(group: Any = None) -> str:
    """The address this rank's traffic leaves from: the route toward the rendezvous
    host (``MASTER_ADDR``), or ``GROUPER_ADDRESS`` when set."""
    if os.environ.get("GROUPER_ADDRESS"):
        return os.environ["GROUPER_ADDRESS"]
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((socket.gethostbyname(master), 9))  # UDP: picks a route, sends nothing
        return s.getsockname()[0]


def ring_addresses(group: Any = None) -> list[str]:
    """Address of every rank of ``group``, in rank order (one all_gather_object)."""
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, local_address(group), group=group)
    return [str(a) for a in out]


def ring_flows(addresses: list[str], rank: int, grad_bytes: float) -> list[tuple[str, float]]:
    """(destination address, bytes per iteration) of ``rank`` in a ring all-reduce."""
    w = len(addresses)
    if w < 2:
        return []
    succ = addresses[(rank + 1) % w]
    if succ == addresses[rank]:
        return []  # the successor shares this host: nothing crosses the network
    return [(succ, 2 * (w - 1) / w * grad_bytes)]


def attach(
    model: torch.nn.parallel.DistributedDataParallel, job: Job | None = None, group: Any = None
) -> Job:
    """Count ``model``'s iterations and declare its load; returns the (started) job.

    ``job`` defaults to ``Job.from_env()`` (the job ``grouper run`` registered)."""
    if job is None:
        job = Job.from_env()
    if not job.active and not job._closed.is_set():
        job.start()
    grad = gradient_bytes(model.module)
    flows = ring_flows(ring_addresses(group), dist.get_rank(group), grad)
    job.declare(flows, arch="ring", model_bytes=grad)
    model.register_comm_hook(_HookState(job, model.process_group), _counting_allreduce)
    return job


class _HookState:
    def __init__(self, job: Job, group: Any) -> None:
        self.job, self.group = job, group


def _counting_allreduce(state: _HookState, bucket: Any) -> torch.futures.Future:
    """DDP's default all-reduce (average over its group); one step per backward pass."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

    fut = allreduce_hook(state.group, bucket)
    if not bucket.is_last():
        return fut

    def counted(done: torch.futures.Future) -> torch.Tensor:
        state.job.step()  # the iteration's last gradients crossed the network
        return done.value()

    # counted when the all-reduce completes, not when it starts: a stage ends when its
    # bytes have moved, and the scheduler moves the job on to its next stage only then
    return fut.then(counted)


# DDP checks the hook's annotations as objects (this module's are strings)
_counting_allreduce.__annotations__ = {
    "state": _HookState,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}
