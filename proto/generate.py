"""Generate the gRPC stubs (``grouper/v1/*_pb2*.py``) from ``proto/``.

The one generator: ``make`` calls it for the working tree, and both distributions'
``setup.py`` call it while building a wheel, so a wheel carries stubs made by the
``grpcio-tools`` its build pinned. Stubs are never committed.

    python proto/generate.py OUT_DIR     # writes OUT_DIR/grouper/v1/*_pb2*.py
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent


def generate(out_dir: str | Path) -> list[Path]:
    """Compile every ``proto/grouper/v1/*.proto`` into ``out_dir``; the files written."""
    from grpc_tools import protoc

    out = Path(out_dir)
    (out / "grouper" / "v1").mkdir(parents=True, exist_ok=True)
    protos = sorted((PROTO_DIR / "grouper" / "v1").glob("*.proto"))
    well_known = resources.files("grpc_tools") / "_proto"
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"-I{well_known}",
        f"--python_out={out}",
        f"--grpc_python_out={out}",
        f"--pyi_out={out}",
        *(str(p) for p in protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {', '.join(p.name for p in protos)}")
    written = []
    for p in protos:
        stem = out / "grouper" / "v1" / p.stem
        written += [Path(f"{stem}_pb2.py"), Path(f"{stem}_pb2.pyi"), Path(f"{stem}_pb2_grpc.py")]
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python proto/generate.py OUT_DIR", file=sys.stderr)
        sys.exit(2)
    generate(sys.argv[1])
