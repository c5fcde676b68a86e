"""A registration with 1,000 jobs held: ``RegisterJob`` on a real agent's Unix socket
(the agent ``grouper bench discovery`` starts, a process in a network namespace of its
own, removed afterwards), one flow each, back to back. ``HELD`` jobs are registered
first; each of the next ``TIMED`` calls is a sample, from the call to its answer."""

from __future__ import annotations

import inspect
import time

from benchmarks._common import module, need_root, samples

HELD = 1000
TIMED = 20


def _registration(i: int) -> object:
    from grouper.v1 import agent_pb2 as pb

    msg = pb.JobRegistration(cojob_id=f"c{i}", job_id="j", arch="flows", stage_iterations=[100])
    msg.flows.add(src_host="a", dst_host="b", dst_port=10000 + i, bytes_per_iteration=1e6)
    return msg


def _register(stub: object, i: int) -> float:
    t0 = time.perf_counter()
    ack = stub.RegisterJob(_registration(i), timeout=60)
    seconds = time.perf_counter() - t0
    if not ack.ok:
        raise RuntimeError(f"registration {i} refused: {ack.error}")
    return seconds


class RegisterJob:
    unit = "seconds"
    timeout = 900

    def setup_cache(self) -> list[float]:
        need_root()
        import grpc

        from grouper.v1 import agent_pb2_grpc as pbg

        testbed = module("grouper.agent.discovery.bench").Testbed
        pids = ("pids",) if "mechanism" in inspect.signature(testbed).parameters else ()
        with testbed(0.1, *pids) as tb:
            with grpc.insecure_channel(f"unix:{tb.socket}") as channel:
                stub = pbg.RegistryStub(channel)
                for i in range(HELD):
                    _register(stub, i)
                return [_register(stub, HELD + i) for i in range(TIMED)]

    def setup(self, times: list[float]) -> None:
        need_root()

    def track_at_1000_held(self, times: list[float]) -> dict:
        return samples(times)
