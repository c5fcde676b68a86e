"""Push one plan to an agent over mutual TLS as some identity; run inside a namespace.

python tests/tls_call.py ADDR PKI_DIR IDENTITY AGENT_HOST VERSION FLOW_ID BAND DSCP
prints "applied", "refused: <error>" (the agent's answer) or "<STATUS>: <details>".
With VERSION "probe" it asks for calibration sockets instead (ProbeListen, one task)
and prints "listening on N port(s)".
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc

from grouper.v1 import agent_pb2 as pb
from grouper.v1 import agent_pb2_grpc as pbg


def main(argv: list[str]) -> str:
    addr, pki, identity, host, version, flow, band, dscp = argv
    d = Path(pki)
    creds = grpc.ssl_channel_credentials(
        root_certificates=(d / "ca.pem").read_bytes(),
        private_key=(d / f"{identity}.key").read_bytes(),
        certificate_chain=(d / f"{identity}.pem").read_bytes(),
    )
    plan = pb.Plan(
        version=0 if version == "probe" else int(version),
        host=host,
        flows=[pb.FlowPriority(flow_id=flow, band=int(band), dscp=int(dscp))],
    )
    options = [("grpc.ssl_target_name_override", host)]
    with grpc.secure_channel(addr, creds, options=options) as ch:
        try:
            if version == "probe":
                got = pbg.AgentStub(ch).ProbeListen(
                    pb.ProbeListenRequest(tasks=1), timeout=5, wait_for_ready=True
                )
                return f"listening on {len(got.ports)} port(s)"
            res = pbg.AgentStub(ch).ApplyPlan(plan, timeout=5, wait_for_ready=True)
        except grpc.RpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
    return "applied" if res.applied else f"refused: {res.error}"


if __name__ == "__main__":
    print(main(sys.argv[1:]), flush=True)
