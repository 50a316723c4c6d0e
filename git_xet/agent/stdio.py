"""Keep stdout for protocol lines only.

git-lfs kills a worker on any stray byte on its stdout. At start the agent moves the real
stdout to a private descriptor and points fd 1 (and sys.stdout) at stderr, so a print() in a
library, or a write from C code, lands on stderr instead.
"""

from __future__ import annotations

import _thread
import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms per agent start
if TYPE_CHECKING:
    from typing import TextIO


class ProtocolOut:
    """Line writer on the private copy of the original stdout; thread-safe, flushed per line."""

    def __init__(self) -> None:
        fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._out: TextIO = os.fdopen(fd, "w", encoding="utf-8", newline="\n")
        self._lock = _thread.allocate_lock()  # threading itself costs ~3 ms to import

    def send(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()

    def fileno(self) -> int:
        """The real stdout (fd 1 itself now points at stderr)."""
        return self._out.fileno()

    def close(self) -> None:
        """Close the private descriptor (a fork server's copy of the agent that started it)."""
        self._out.close()


class InputLines:
    """Lines of a descriptor (git-lfs's requests on stdin), read with os.read and split here,
    so that the bytes read but not yet consumed are known (`unread`) and a process handed the
    descriptor can carry on from them (handover.py). `pending`: bytes read before, elsewhere."""

    def __init__(self, fd: int, pending: bytes = b"") -> None:
        self._fd = fd
        self._buffer = pending

    def unread(self) -> bytes:
        return self._buffer

    def __iter__(self) -> InputLines:
        return self

    def __next__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line, self._buffer = self._buffer[: end + 1], self._buffer[end + 1 :]
                return line.decode("utf-8", "replace")
            block = os.read(self._fd, 65536)
            if not block:
                if not self._buffer:
                    raise StopIteration
                line, self._buffer = self._buffer, b""
                return line.decode("utf-8", "replace")
            self._buffer += block
