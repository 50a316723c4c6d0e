"""What the client keeps on disk is the user's alone: directories 0700, files 0600.

The shard cache and chunk index name content (a chunk hash works as a read capability on a
store that accepts it), logs and push summaries describe the user's work. Another local user
must not list or read any of it. New paths are created private; paths an older git-xet made
wider are tightened when opened, but only paths git-xet owns: never a directory it did not
create (the user's $HOME, a $GIT_XET_CACHE they chose, the .git directory).

POSIX permission bits only: elsewhere (Windows) the user's profile is already private and
os.chmod could only toggle read-only, so nothing is changed there.
"""

from __future__ import annotations

import os
import stat

TYPE_CHECKING = False  # not typing's: the agent imports this module when it logs to a file
if TYPE_CHECKING:
    from typing import TextIO

    StrPath = str | os.PathLike[str]

PRIVATE_DIR = 0o700
PRIVATE_FILE = 0o600
_HAS_MODE_BITS = os.name == "posix"


def tighten(path: StrPath, mode: int) -> None:
    """chmod `path` to `mode` if it grants anything to group or others (and is ours to change)."""
    if not _HAS_MODE_BITS:
        return
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.getuid():
        return  # a link points somewhere git-xet did not make; another user's file is not ours
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, mode)


def private_dirs(base: StrPath, *parts: str, own_base: bool) -> str:
    """`base/parts...`, each level created 0700 or tightened to it; `base` itself is created
    (0700; its missing parents as usual) when missing, but tightened only when `own_base` says
    git-xet owns it."""
    path = os.fspath(base)
    if not os.path.isdir(path):
        os.makedirs(path, mode=PRIVATE_DIR, exist_ok=True)
        own_base = True  # just made: ours
    if own_base:
        tighten(path, PRIVATE_DIR)
    for part in parts:
        path = os.path.join(path, part)
        try:
            os.mkdir(path, PRIVATE_DIR)
        except FileExistsError:
            tighten(path, PRIVATE_DIR)
    return path


def tighten_entries(directory: StrPath) -> None:
    """Tighten what `directory` (git-xet's) holds, one level: files an older version made."""
    if not _HAS_MODE_BITS:
        return
    with os.scandir(directory) as entries:
        for entry in entries:
            tighten(entry.path, PRIVATE_DIR if entry.is_dir(follow_symlinks=False) else PRIVATE_FILE)


def create_private_file(path: StrPath) -> None:
    """Make `path` an empty 0600 file if missing (so whatever opens it next, e.g. SQLite, which
    gives its -wal and -shm files the database's mode, finds it private); tighten it otherwise."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
    except FileExistsError:
        tighten(path, PRIVATE_FILE)


def open_private_append(path: StrPath, *, read: bool = False) -> TextIO:
    """`path` opened for appending (and reading, with `read`), created 0600; an existing regular
    file of ours is tightened (a device such as /dev/stderr is left alone)."""
    flags = (os.O_RDWR if read else os.O_WRONLY) | os.O_APPEND | os.O_CREAT
    fd = os.open(path, flags, PRIVATE_FILE)
    try:
        if _HAS_MODE_BITS:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
                os.fchmod(fd, PRIVATE_FILE)
        return os.fdopen(fd, "a+" if read else "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
