"""grouper.integrations.torch on a real single-process Gloo group (CPU tensors)."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
import torch.distributed as dist  # noqa: E402

import grouper.client as client  # noqa: E402
from grouper.integrations import torch as gt  # noqa: E402


@pytest.fixture
def gloo(tmp_path, monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path}/rendezvous", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def test_gradient_bytes_count_trainable_parameters_only():
    net = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.Linear(20, 3))
    assert gt.gradient_bytes(net) == (10 * 20 + 20 + 20 * 3 + 3) * 4
    net[0].weight.requires_grad_(False)
    assert gt.gradient_bytes(net) == (20 + 20 * 3 + 3) * 4
    assert gt.gradient_bytes(net.to(torch.float64)) == (20 + 20 * 3 + 3) * 8


def test_ring_flows_send_to_the_successor_host():
    a, b, c = "10.0.0.1", "10.0.0.2", "10.0.0.3"
    assert gt.ring_flows([a, b], 0, 1000) == [(b, 1000.0)]
    assert gt.ring_flows([a, b, c], 2, 900) == [(a, 1200.0)]  # 2 (W-1)/W x bytes
    assert gt.ring_flows([a, a, b], 0, 900) == [], "the successor on this host: no network"
    assert gt.ring_flows([a], 0, 900) == []


def test_attach_counts_iterations_and_reads_the_ring_from_the_group(gloo, monkeypatch):
    monkeypatch.setattr(client, "_warned_absent", True)  # no agent here: a quiet no-op job
    net = torch.nn.Linear(8, 4)
    model = torch.nn.parallel.DistributedDataParallel(net)
    job = client.Job("c", "j", [5, 5], socket="/nonexistent")
    assert gt.ring_addresses() == ["127.0.0.1"]
    got = gt.attach(model, job)
    assert got is job and job.model_bytes == (8 * 4 + 4) * 4 and job.arch == "ring"
    assert job.flows == [], "one rank: nothing to send"
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(16, 8)).sum().backward()
        opt.step()
    assert job.iterations_done == 3, "one step per backward pass, counted by the comm hook"
    job.close()


def test_import_grouper_never_imports_torch():
    code = (
        "import sys, grouper, grouper.client, grouper.cli.main; assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
