"""libnftables through ctypes: one in-process transaction per call, no ``nft`` fork.

``Nft.run(text)`` hands a whole script to libnftables, which commits it as a single
netlink batch: all of it applies or none of it does.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
from typing import Any

NFT_CTX_DEFAULT = 0
NFT_CTX_OUTPUT_JSON = 1 << 4
NFT_CTX_OUTPUT_TERSE = 1 << 11


class NftError(RuntimeError):
    pass


class Nft:
    def __init__(self) -> None:
        name = ctypes.util.find_library("nftables") or "libnftables.so.1"
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            raise NftError(f"libnftables not found ({exc}); install the nftables package") from None
        lib.nft_ctx_new.restype = ctypes.c_void_p
        lib.nft_ctx_new.argtypes = [ctypes.c_uint32]
        lib.nft_ctx_free.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_buffer_output.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_buffer_error.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_output_buffer.restype = ctypes.c_char_p
        lib.nft_ctx_get_output_buffer.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_get_error_buffer.restype = ctypes.c_char_p
        lib.nft_ctx_get_error_buffer.argtypes = [ctypes.c_void_p]
        lib.nft_run_cmd_from_buffer.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nft_ctx_output_get_flags.restype = ctypes.c_uint
        lib.nft_ctx_output_get_flags.argtypes = [ctypes.c_void_p]
        lib.nft_ctx_output_set_flags.argtypes = [ctypes.c_void_p, ctypes.c_uint]
        self._lib = lib
        self._ctx = lib.nft_ctx_new(NFT_CTX_DEFAULT)
        lib.nft_ctx_buffer_output(self._ctx)
        lib.nft_ctx_buffer_error(self._ctx)

    def run(self, script: str, *, json_output: bool = False) -> str:
        lib, ctx = self._lib, self._ctx
        flags = lib.nft_ctx_output_get_flags(ctx)
        want = flags | NFT_CTX_OUTPUT_JSON if json_output else flags & ~NFT_CTX_OUTPUT_JSON
        lib.nft_ctx_output_set_flags(ctx, want)
        rc = lib.nft_run_cmd_from_buffer(ctx, script.encode())
        out = (lib.nft_ctx_get_output_buffer(ctx) or b"").decode()
        err = (lib.nft_ctx_get_error_buffer(ctx) or b"").decode()
        if rc != 0:
            raise NftError(err.strip() or f"nft failed with {rc}")
        return out

    def list_json(self, what: str, *, terse: bool = False) -> list[dict[str, Any]]:
        """``nft -j list WHAT``; ``terse``: without set and map elements (``nft -t``)."""
        flags = self._lib.nft_ctx_output_get_flags(self._ctx)
        if terse:
            self._lib.nft_ctx_output_set_flags(self._ctx, flags | NFT_CTX_OUTPUT_TERSE)
        try:
            out = self.run(f"list {what}", json_output=True)
        finally:
            self._lib.nft_ctx_output_set_flags(self._ctx, flags)
        return json.loads(out)["nftables"] if out.strip() else []

    def table_exists(self, family: str, name: str) -> bool:
        return any(
            "table" in o and o["table"]["name"] == name and o["table"]["family"] == family
            for o in self.list_json("tables")
        )

    def close(self) -> None:
        if self._ctx:
            self._lib.nft_ctx_free(self._ctx)
            self._ctx = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
