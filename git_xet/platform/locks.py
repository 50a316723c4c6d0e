"""Locks between processes on files: the one helper every lock in git-xet goes through.

POSIX: `flock` for whole-file locks (shared or exclusive; released when the descriptor is
closed), `lockf` for one-byte ranges (index_sqlite's striped xorb locks). Windows: msvcrt's
byte-range locks, which are exclusive only: a shared lock is taken exclusively there (writers
that could share one wait for each other: slower, never wrong). Neither present: a lock call
raises OSError saying so, and nothing else in the package needs one at import.

filelock (the well-kept library) was considered: it has neither shared locks nor ranges, which
the object store's writers and the index's stripes need.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from types import ModuleType

_WINDOWS_RETRY = 0.05  # seconds between attempts at a held msvcrt lock (it has no blocking wait)
# Windows' locks are mandatory (a locked byte cannot be read by others): a whole-file lock there
# is one byte past anything a lock file holds (the server's holds its pid, which others read).
_WINDOWS_WHOLE_FILE = 0x7FFFFFFF


def _msvcrt() -> ModuleType:
    """Windows' C runtime (a plain module to mypy, which checks this package as Linux)."""
    try:
        return importlib.import_module("msvcrt")
    except ImportError:
        raise OSError(f"git-xet: no file locks on this platform ({sys.platform}): neither fcntl nor msvcrt is available") from None


def lock_range(fd: int, offset: int, length: int = 1, *, shared: bool = False, wait: bool = True) -> None:
    """Lock `length` bytes of `fd` from `offset` (beyond its end is fine). BlockingIOError when
    wait=False and another process holds it."""
    try:
        import fcntl
    except ImportError:
        _windows_lock(fd, offset, length, wait)
        return
    operation = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
    fcntl.lockf(fd, operation, length, offset)


def unlock_range(fd: int, offset: int, length: int = 1) -> None:
    try:
        import fcntl
    except ImportError:
        msvcrt = _msvcrt()
        os.lseek(fd, offset, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, length)
        return
    fcntl.lockf(fd, fcntl.LOCK_UN, length, offset)


def _windows_lock(fd: int, offset: int, length: int, wait: bool) -> None:
    msvcrt = _msvcrt()
    while True:
        os.lseek(fd, offset, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, length)
            return
        except OSError:
            if not wait:
                raise BlockingIOError(f"the lock on descriptor {fd} is held by another process") from None
        time.sleep(_WINDOWS_RETRY)


def lock_file(fd: int, *, shared: bool = False, wait: bool = True) -> None:
    """Lock all of `fd`'s file (released by unlock_file or closing the descriptor).
    BlockingIOError when wait=False and another holder conflicts."""
    try:
        import fcntl
    except ImportError:
        _windows_lock(fd, _WINDOWS_WHOLE_FILE, 1, wait)
        return
    fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB))


def unlock_file(fd: int) -> None:
    try:
        import fcntl
    except ImportError:
        unlock_range(fd, _WINDOWS_WHOLE_FILE, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def held_lock(lock_file_path: Path | str, *, shared: bool = False, wait: bool = True, mode: int = 0o600) -> Iterator[int]:
    """The lock of `lock_file_path` (made with `mode` if missing) held for the block; its
    descriptor is yielded. Closing the descriptor releases it."""
    fd = os.open(lock_file_path, os.O_RDWR | os.O_CREAT, mode)
    try:
        lock_file(fd, shared=shared, wait=wait)
        yield fd
    finally:
        os.close(fd)


def opening_lock(database: Path) -> AbstractContextManager[int]:
    """Held (across processes: `<database>.opening`) while a process opens a SQLite file that
    others may be opening at the same moment. The first opener switches a new file to WAL and
    writes its schema; SQLite refuses a concurrent switch at once ("database is locked", without
    its busy wait) and can show another opener a half-made schema. Opening an existing file
    holds it for a few system calls."""
    return held_lock(f"{database}.opening")
