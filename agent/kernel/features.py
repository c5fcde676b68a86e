"""Kernel features the agent needs or can use, probed once at start (one place).

Each probe loads a throwaway nftables table of its own, with a name no other agent
uses, in one transaction, and deletes it: nothing of anyone else's is touched.
"""

from __future__ import annotations

import os
import platform
import secrets

from grouper.agent.kernel.nft import Nft, NftError


def kernel_release() -> str:
    return platform.release()


def _try_table(nft: Nft, body: str) -> str:
    """ "" if the kernel takes a table with ``body``, else nftables' first error line."""
    name = f"grouper_probe_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        nft.run(f"table inet {name} {{\n{body}\n}}\ndelete table inet {name}\n")
        return ""
    except NftError as exc:
        try:  # the transaction failed as a whole; this only makes sure
            nft.run(f"table inet {name} {{}}\ndelete table inet {name}\n")
        except NftError:
            pass  # no nftables at all: the enforcer's start says so and exits 2
        return str(exc).splitlines()[0] if str(exc) else "refused"


def cgroup_match(nft: Nft) -> str:
    """ "" when nftables and the kernel match ``socket cgroupv2`` in the output hook in a
    set lookup (Linux 5.13+ with nft_socket), else why not."""
    body = (
        "  set s { typeof socket cgroupv2 level 1 . ip daddr; }\n"
        "  chain c { type filter hook output priority 0; policy accept;\n"
        "    socket cgroupv2 level 1 . ip daddr @s counter; }"
    )
    return _try_table(nft, body)
