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
