"""Durable atomic file writes shared by the server store, the client caches and downloads.

Behind the platform seam because durability is spelled differently per OS: POSIX fsyncs the
directory after a rename and refuses to follow a symlink at the temp file's name (O_NOFOLLOW);
Windows has neither (a directory cannot be opened to fsync; a new file made with O_EXCL never
follows a link there), so both are skipped where absent."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


TEMP_SUFFIX = ".tmp"  # what a writer killed mid-write leaves behind: `.<name>.<random>.tmp`
# atomic_write hands the kernel at most this much per write(). One write of a whole 64 MiB
# xorb let the page cache take it in large folios, and on a VM (this project's reference
# machine) those came from memory the host had never backed, each page faulted in on first
# touch: a server's system time for a 768 MiB push fell from 2.0-2.6 s to 1.6-1.8 s with
# 64 KiB writes. On other machines the extra system calls cost nothing measurable.
WRITE_PIECE = 64 << 10


# Directories this process made or found (so a write into one does not ask again: each system
# call is a GIL release, which a busy server pays for in thread switches). Forgotten when one
# turns out to be gone, and bounded: it is a cache, never the truth.
_KNOWN_DIRS: set[str] = set()
_KNOWN_DIRS_MAX = 4096


_NEW_PRIVATE_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
_DIRECTORIES_SYNC = sys.platform != "win32"  # Windows cannot open a directory to fsync it
_NAME_ATTEMPTS = 100


def _new_private_file(directory: str, name: str) -> tuple[int, str]:
    """What tempfile.mkstemp does (an exclusive new 0600 file with a random name), without
    importing tempfile (shutil and random come with it: ~7 ms in each agent)."""
    for _ in range(_NAME_ATTEMPTS):
        path = os.path.join(directory, f".{name}.{os.urandom(6).hex()}{TEMP_SUFFIX}")
        try:
            return os.open(path, _NEW_PRIVATE_FILE, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temp file name in {directory} after {_NAME_ATTEMPTS} tries")


def _temp_file_in(directory: Path, name: str) -> tuple[int, str]:
    """A new temp file (descriptor, path) in `directory`, made first if need be."""
    key = str(directory)
    if key not in _KNOWN_DIRS:
        directory.mkdir(parents=True, exist_ok=True)
        if len(_KNOWN_DIRS) >= _KNOWN_DIRS_MAX:
            _KNOWN_DIRS.clear()
        _KNOWN_DIRS.add(key)
    try:
        return _new_private_file(key, name)
    except FileNotFoundError:  # removed since we saw it
        _KNOWN_DIRS.discard(key)
        directory.mkdir(parents=True, exist_ok=True)
        return _new_private_file(key, name)


@contextmanager
def _atomic_descriptor(path: Path, *, mode: int, replace: bool, durable: bool) -> Iterator[int]:
    """atomic_output's work on a raw descriptor (see there)."""
    fd, tmp = _temp_file_in(path.parent, path.name)
    try:
        try:
            yield fd
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if not durable or not _DIRECTORIES_SYNC:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


@contextmanager
def atomic_output(path: Path, *, mode: int = 0o644, replace: bool = True, durable: bool = True) -> Iterator[BinaryIO]:
    """A file to write that appears at `path` whole, or not at all, even after a crash.

    Writes go to a temp file in the same directory; on success it is fsynced, given `mode`,
    renamed over `path` and the directory fsynced. On any error the temp file is removed.
    With replace=False an existing `path` wins: FileExistsError is raised and it is left
    untouched (the temp file is hard-linked into place, which fails atomically if `path`
    exists: of racing writers exactly one succeeds). durable=False skips the fsyncs, for files
    whose loss in a crash costs nothing (a download git-lfs will verify and move anyway): the
    file still appears whole or not at all to every reader.
    """
    with _atomic_descriptor(Path(path), mode=mode, replace=replace, durable=durable) as fd, os.fdopen(fd, "wb", closefd=False) as out:
        yield out


def _write_all(fd: int, view: memoryview) -> None:
    while view:
        view = view[os.write(fd, view) :]


def atomic_write(path: Path, *parts: bytes | memoryview, mode: int = 0o644, replace: bool = True) -> None:
    """Write the concatenation of `parts` atomically (see atomic_output), in WRITE_PIECE
    writes straight to the descriptor (no buffered file object: fewer system calls per small
    object). Several parts avoid building one big buffer (e.g. a xorb body and its footer)."""
    with _atomic_descriptor(Path(path), mode=mode, replace=replace, durable=True) as fd:
        for part in parts:
            view = memoryview(part).cast("B")
            for start in range(0, len(view), WRITE_PIECE):
                _write_all(fd, view[start : start + WRITE_PIECE])
