"""A SHA-256 whose running state can be saved as bytes and resumed in another process.

hashlib's objects copy only within a process. The server's upload streams (upload_streams.py)
hash a file's xorbs as they arrive, and with `--workers N` one file's xorbs land in different
processes, so the digest's state travels between them through the data directory.
OpenSSL's SHA256_Init/Update/Final (in the libcrypto that hashlib itself uses) keep their
whole state in a plain struct, SHA256_CTX, whose 112 bytes are the saved state. The hashing
is OpenSSL's, as hashlib's is (SHA extensions included), and ctypes releases the interpreter
lock during each call, as hashlib does on large updates.

Where that libcrypto cannot be found (not Linux, or a Python without OpenSSL), `available()`
is False and callers do without.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import threading
from pathlib import Path

log = logging.getLogger("git_xet.server")

STATE_BYTES = 112  # sizeof(SHA256_CTX): h[8], Nl, Nh, data[16], num, md_len, 32-bit each

_lib: ctypes.CDLL | None = None
_loaded = False
_loading = threading.Lock()


def _libcrypto_paths() -> list[str]:
    """The libcrypto this process already mapped for hashlib first, then the usual sonames."""
    try:
        import _hashlib  # noqa: F401 - maps hashlib's libcrypto into this process
    except ImportError:  # a Python built without OpenSSL
        pass
    paths = []
    try:
        for line in Path("/proc/self/maps").read_text().splitlines():
            path = line.split(maxsplit=5)[-1]
            if "/libcrypto" in path and path not in paths:
                paths.append(path)
    except OSError:
        pass
    return [*paths, "libcrypto.so.3", "libcrypto.so.1.1"]


def _checked(lib: ctypes.CDLL) -> bool:
    """True if lib's SHA-256 matches hashlib's, across a saved and resumed state."""
    lib.SHA256_Init.argtypes = [ctypes.c_void_p]
    lib.SHA256_Update.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    lib.SHA256_Final.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    for name in ("SHA256_Init", "SHA256_Update", "SHA256_Final"):
        getattr(lib, name).restype = ctypes.c_int
    first = ResumableSha256(lib)
    first.update(b"resumable ")
    second = ResumableSha256.from_state(first.state, lib)
    second.update(b"sha256")
    return second.hexdigest() == hashlib.sha256(b"resumable sha256").hexdigest()


def _library() -> ctypes.CDLL | None:
    global _lib, _loaded
    with _loading:
        if not _loaded:
            _loaded = True
            for path in _libcrypto_paths():
                try:
                    lib = ctypes.CDLL(path)
                    if _checked(lib):
                        _lib = lib
                        break
                except (OSError, AttributeError):
                    continue
            if _lib is None:
                log.info("no libcrypto with SHA256_Init found: upload streams stay within one server process")
    return _lib


def available() -> bool:
    """Whether resumable SHA-256 states work in this process."""
    return _library() is not None


class ResumableSha256:
    """hashlib.sha256's update/copy/digest/hexdigest, plus `state` and `from_state`."""

    __slots__ = ("_ctx", "_lib")

    def __init__(self, lib: ctypes.CDLL | None = None) -> None:
        found = lib if lib is not None else _library()
        if found is None:
            raise RuntimeError("resumable SHA-256 needs libcrypto (see sha256_state.available)")
        self._lib = found
        self._ctx = ctypes.create_string_buffer(STATE_BYTES)
        if self._lib.SHA256_Init(self._ctx) != 1:
            raise RuntimeError("SHA256_Init failed")

    @classmethod
    def from_state(cls, state: bytes, lib: ctypes.CDLL | None = None) -> ResumableSha256:
        if len(state) != STATE_BYTES:
            raise ValueError(f"a SHA-256 state is {STATE_BYTES} bytes, not {len(state)}")
        resumed = cls(lib)
        ctypes.memmove(resumed._ctx, state, STATE_BYTES)
        return resumed

    @property
    def state(self) -> bytes:
        return self._ctx.raw

    def update(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data).cast("B")
        if not view.nbytes:
            return
        if isinstance(data, bytes):
            self._lib.SHA256_Update(self._ctx, data, len(data))
        elif not view.readonly:  # a receive buffer's view: hashed in place
            # The address of its first byte, not a `c_char * n` array over it: ctypes makes
            # (and soon drops) a new array type for every length, ~8 us with the interpreter
            # lock held, per chunk of every upload.
            self._lib.SHA256_Update(self._ctx, ctypes.addressof(ctypes.c_char.from_buffer(view)), view.nbytes)
        else:  # a view of bytes (a chunk read back): ctypes takes no pointer to it, so a copy
            self._lib.SHA256_Update(self._ctx, bytes(view), view.nbytes)

    def copy(self) -> ResumableSha256:
        return ResumableSha256.from_state(self.state, self._lib)

    def digest(self) -> bytes:
        out = ctypes.create_string_buffer(32)
        if self._lib.SHA256_Final(out, self.copy()._ctx) != 1:
            raise RuntimeError("SHA256_Final failed")
        return out.raw

    def hexdigest(self) -> str:
        return self.digest().hex()
