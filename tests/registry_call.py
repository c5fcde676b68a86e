"""Registry calls from a process of the test's choosing (run as another user by
tests/kernel/test_users.py, with the client-only venv's Python).

    python tests/registry_call.py SOCKET

prints ``ready PID``; then for every stdin line ``{"method": M, "msg": {...}}`` makes
the call ``M`` (RegisterJob, ReportProgress, JobFinished) on the agent's registry
socket and prints ``{"ok": ..., "error": ...}``.
"""

from __future__ import annotations

import json
import os
import sys

import grpc

from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg

MESSAGES = {
    "RegisterJob": pb.JobRegistration,
    "ReportProgress": pb.ProgressReport,
    "JobFinished": pb.JobFinishedReport,
}


def main() -> None:
    print(f"ready {os.getpid()}", flush=True)
    with grpc.insecure_channel(f"unix:{sys.argv[1]}") as ch:
        stub = pbg.RegistryStub(ch)
        for line in sys.stdin:
            call = json.loads(line)
            try:
                ack = getattr(stub, call["method"])(
                    MESSAGES[call["method"]](**call["msg"]), timeout=10
                )
                out = {"ok": ack.ok, "error": ack.error}
            except grpc.RpcError as exc:
                out = {"ok": False, "error": f"rpc: {exc.code().name}: {exc.details()}"}
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
