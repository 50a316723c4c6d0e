"""Messages for the person at the terminal (retries, the push summary).

git-lfs 3.3.0 shows an agent's stderr only with GIT_TRACE=1, and its progress meter counts the
bytes we process, not what we send. The agent does share git's controlling terminal, so writing
to /dev/tty reaches the user; without one (CI, cron) nothing is shown and $GIT_XET_LOG or
`git xet stats` has it. $GIT_XET_QUIET=1 silences it.
"""

from __future__ import annotations

import logging
import os

NOTICE = "notice"  # log records with extra={"notice": True} are meant for the user
_CLEAR_LINE = b"\r\x1b[K"  # over git-lfs's meter line, which it redraws on its next tick
_tty: int | None = None
_tried = False


def tell(message: str) -> None:
    """Show one line on the controlling terminal, if there is one; never fails."""
    global _tty, _tried
    if os.environ.get("GIT_XET_QUIET"):
        return
    if not _tried:
        _tried = True
        try:
            _tty = os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
        except OSError:
            _tty = None
    if _tty is None:
        return
    try:
        os.write(_tty, _CLEAR_LINE + f"git-xet: {message}\n".encode("utf-8", "replace"))
    except OSError:
        pass


class TerminalHandler(logging.Handler):
    """Shows the log records marked as notices (see NOTICE) on the terminal."""

    def filter(self, record: logging.LogRecord) -> bool:
        return bool(getattr(record, NOTICE, False))

    def emit(self, record: logging.LogRecord) -> None:
        tell(record.getMessage())
