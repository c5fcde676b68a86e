"""A throwaway certificate authority for TLS tests (openssl, 2-day certificates)."""

from __future__ import annotations

import subprocess
from pathlib import Path


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(d: Path, names: tuple[str, ...]) -> Path:
    """CA ``ca.pem`` and, per name, ``<name>.pem``/``<name>.key`` (CN and DNS SAN = name)."""
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
            "-out", "ca.pem", "-days", "2", "-subj", "/CN=grouper-test-ca", cwd=d)  # fmt: skip
    for name in names:
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
                "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)  # fmt: skip
        (d / f"{name}.ext").write_text(f"subjectAltName=DNS:{name}\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
                "-extfile", f"{name}.ext", cwd=d)  # fmt: skip
        (d / f"{name}.key").chmod(0o600)
    return d
