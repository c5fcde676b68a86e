"""One rank of a DDP trial (PyTorch, Gloo over TCP, CPU tensors, synthetic data).

Run under ``grouper run`` by :mod:`experiments.ddp_runner`::

    python -m grouper.experiments.ddp_trial --master ADDR --port P --rank R --world W \\
        --width H --stages 4,8 --seed S --lr LR

Once the process group is up it prints ``{"ready": rank}``. Before each stage the rank
reads one line on stdin: ``go`` trains the stage, anything
else (``stop``: the trial was pruned at this rung) ends the process. After a stage it
prints ``{"stage": k, "loss": x, "t": unix time}``; the loss is averaged over the ranks,
so every rank prints the same value. The model is an MLP whose hidden width sets the
gradient size (about 4 x width^2 bytes); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main() -> None:
    p = argparse.ArgumentParser()
    for name in ("master", "stages"):
        p.add_argument(f"--{name}", required=True)
    for name in ("port", "rank", "world", "width", "seed"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    os.environ.update(MASTER_ADDR=a.master, MASTER_PORT=str(a.port))

    import torch
    import torch.distributed as dist

    from grouper.integrations.torch import attach

    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    torch.manual_seed(a.seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(64, a.width),
        torch.nn.ReLU(),
        torch.nn.Linear(a.width, a.width),
        torch.nn.ReLU(),
        torch.nn.Linear(a.width, 10),
    )
    model = torch.nn.parallel.DistributedDataParallel(net)
    job = attach(model)  # counts iterations, declares gradient bytes and the ring
    print(json.dumps({"ready": a.rank, "t": time.time()}), flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr)
    gen = torch.Generator().manual_seed(1000 * a.seed + a.rank)
    target = torch.randn(64, 10, generator=torch.Generator().manual_seed(7))
    try:
        for k, n in enumerate(int(x) for x in a.stages.split(",")):
            if sys.stdin.readline().strip() != "go":
                break  # pruned at this rung
            for _ in range(n):
                x = torch.randn(a.batch, 64, generator=gen)
                loss = torch.nn.functional.mse_loss(model(x), x @ target)
                opt.zero_grad()
                loss.backward()
                opt.step()
            avg = loss.detach().clone()
            dist.all_reduce(avg)
            value = float(avg) / a.world
            print(json.dumps({"stage": k, "loss": value, "t": time.time()}), flush=True)
    finally:
        job.close()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
