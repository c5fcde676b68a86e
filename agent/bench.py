"""``grouper bench agent``: plan apply latency through the agent's real code path.

The command creates a namespace with a veth, runs the measurement inside it in a child
process, and deletes the namespace afterwards whatever happens. Measured: validating
the plan against the registry, computing the desired rules and committing the nft
transaction (``AgentCore.apply_plan``), for a full plan and for a change of 10 flows.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from grouper.agent.kernel.netns import add_netns, del_netns, ip, veth
from grouper.common.errors import ConfigError
from grouper.common.interpreter import python_argv
from grouper.common.output import write_json

if TYPE_CHECKING:  # the measuring child imports these; the CLI process need not
    from grouper.agent.core import AgentCore
    from grouper.agent.registry import Registry
    from grouper.common.queues import QueueConfig


def bench_agent(flows: int, runs: int, json_path: str | None) -> int:
    if flows < 10:
        raise ConfigError("--flows", f"must be at least 10, got {flows}")
    if os.geteuid() != 0:
        raise ConfigError("bench agent", "needs root (it creates a network namespace)")
    ns = f"grouper-bench-{os.getpid()}"
    try:
        add_netns(ns)
        veth(ns, "bench0", ns, "bench1")
        ip("-n", ns, "link", "set", "bench0", "up")
        proc = subprocess.run(
            ["ip", "netns", "exec", ns,
             *python_argv("-m", "grouper.agent.bench", str(flows), str(max(runs, 3)))],
            capture_output=True, text=True,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"bench failed: {proc.stderr[-2000:]}")
        result = json.loads(proc.stdout)
    finally:
        del_netns(ns)
    write_json(result, json_path)
    if json_path != "-":
        print(
            f"agent apply, {flows} flows ({result['backend']}): full "
            f"{result['apply_full_ms']:.1f} ms, change of 10 "
            f"{result['apply_incremental_ms']:.1f} ms (median of {result['runs']})"
        )
    return 0


def _bench_registry(flows: int) -> tuple[Registry, dict[str, str], list[str]]:
    """``flows // 10`` jobs on this host ("me"), ten flows each to a host of their own:
    the registry, every host's address, and the flow ids in plan order."""
    from grouper.agent.registry import Registry

    hosts = {f"h{i}": f"10.{i // 250 % 250}.{i % 250}.2" for i in range(flows // 10 + 1)}
    hosts["me"] = "10.255.0.1"
    reg = Registry(known_hosts=set(hosts))
    ids = []
    for j in range(flows // 10):
        reg.register(
            {
                "cojob_id": f"c{j}",
                "job_id": "j",
                "arch": "flows",
                "stage_iterations": [100],
                "flows": [
                    {
                        "src_host": "me",
                        "dst_host": f"h{j}",
                        "dst_port": 5000 + k,
                        "bytes_per_iteration": 1e6,
                    }
                    for k in range(10)
                ],
            }
        )
        ids += [f"c{j}/j/h{j}:{5000 + k}" for k in range(10)]
    return reg, hosts, ids


def _plan(ids: list[str], queues: QueueConfig, version: int, shift: int, changed: int) -> dict:
    """Every flow in a data band rotated by ``shift``; the first ``changed`` flows one
    band further (an incremental change of that many flows)."""
    data = queues.data_bands
    return {
        "version": version,
        "host": "me",
        "flows": [
            {
                "flow_id": f,
                "band": data[(i + shift + (1 if i < changed else 0)) % len(data)],
                "dscp": queues.dscp_table[data[i % len(data)]],
            }
            for i, f in enumerate(ids)
        ],
    }


async def _timed_apply(core: AgentCore, plan: dict, expect_changed: int) -> float:
    """Milliseconds ``apply_plan`` took; a plan the kernel refused ends the benchmark."""
    t0 = time.perf_counter()
    ok, err, changed = await core.apply_plan(plan)
    ms = (time.perf_counter() - t0) * 1e3
    if not ok or changed != expect_changed:
        raise RuntimeError(f"plan {plan['version']}: {err or f'{changed} rules changed'}")
    return ms


async def _measure(flows: int, runs: int) -> dict:
    from grouper.agent.core import AgentCore
    from grouper.agent.enforcer import KernelThread
    from grouper.common.queues import QueueConfig

    queues = QueueConfig()
    reg, hosts, ids = _bench_registry(flows)
    kernel = KernelThread("bench0", queues, 10000, control_ports=(7070,))
    try:
        await kernel.call(kernel.enforcer.start)
        core = AgentCore("me", reg, kernel, queues, hosts, plan_ttl=1e9)
        full, incr = [], []
        for r in range(runs):
            await kernel.apply({})
            core.rules = {}
            full.append(await _timed_apply(core, _plan(ids, queues, 2 * r + 1, r, 0), len(ids)))
            incr.append(await _timed_apply(core, _plan(ids, queues, 2 * r + 2, r, 10), 10))
        return {
            "flows": len(ids),
            "backend": kernel.backend,
            "runs": runs,
            "apply_full_ms": statistics.median(full),
            "apply_incremental_ms": statistics.median(incr),
            "apply_full_ms_all": full,
            "apply_incremental_ms_all": incr,
        }
    finally:
        kernel.run_sync(kernel.enforcer.stop)
        kernel.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_measure(int(sys.argv[1]), int(sys.argv[2])))))
