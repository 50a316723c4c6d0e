"""Progress events for one object, as git-lfs wants them. Imported before anything heavy: the
first byte must be reported as soon as a transfer request arrives."""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms per agent start
if TYPE_CHECKING:
    from collections.abc import Callable

PROGRESS_INTERVAL = 0.2


class Progress:
    """Monotonic, throttled progress for one object.

    With `first_byte`, the first byte is reported at once: git-lfs holds its other workers
    until worker 0 reports progress on its first object (tq/adapterbase.go), and an agent
    cannot tell whether it is worker 0, so an agent's first object does it. Later objects
    report at most every PROGRESS_INTERVAL and once at the end: an object that takes less
    (every small file) costs one progress line, not two (each a JSON line and a write)."""

    def __init__(self, send: Callable[[int, int], None], total: int, *, first_byte: bool = True, reported: int = 0) -> None:
        """`reported`: bytes git-lfs was told of already (by the agent, before its handover)."""
        self._send = send
        self.total = total
        self.reported = reported
        self.done = 0
        self._last = 0.0
        if first_byte:
            self._report(min(1, total))
        else:
            self._last = time.monotonic()

    def _report(self, so_far: int) -> None:
        if so_far > self.reported:
            self._send(so_far, so_far - self.reported)
            self.reported = so_far
            self._last = time.monotonic()

    def add(self, n: int) -> None:
        self.done = min(self.total, self.done + n)
        if time.monotonic() - self._last >= PROGRESS_INTERVAL:
            self._report(self.done)

    def finish(self) -> None:
        self._report(self.total)
