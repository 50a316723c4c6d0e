"""os.path.realpath of a path under a directory already resolved, in fewer system calls.

An upload agent checks that each file git-lfs names lies in the repository's LFS storage,
symbolic links followed (agent/session.py). os.path.realpath lstat()s every directory from the
root down: about ten system calls and ~50 us per object on a deep repository path, a thousand
times in a push of a thousand small files. Below a base that is itself resolved, only the names
under it can be links: one lstat each (`objects/ab/cd/<oid>`: four), the last of which is also
the file's stat. Whatever is not that plain shape is left to os.path.realpath.
"""

from __future__ import annotations

import os
import stat

_NOT_PLAIN = ("", os.curdir, os.pardir)


def realpath_below(path: str, bases: tuple[str, ...]) -> tuple[str, os.stat_result | None]:
    """os.path.realpath(path), and, when it was found on the way, the os.stat of what it names
    (None: the caller stats it if it needs to).

    `bases` are resolved directories (os.path.realpath'd), each ending in os.sep. A path that
    is one of them followed by names that are neither empty, `.` nor `..`, none of them a
    symbolic link, resolves to itself. Anything else (relative, `..`, a link on the way, under
    no base, a missing name) goes to os.path.realpath, which follows links wherever they lead:
    the answer is the same either way."""
    for base in bases:
        if not path.startswith(base):
            continue
        names = path[len(base) :].split(os.sep)
        if any(name in _NOT_PLAIN for name in names) or (os.altsep and os.altsep in path):
            break
        current = base[:-1]
        try:
            for name in names:
                current = f"{current}{os.sep}{name}"
                found = os.lstat(current)
                if stat.S_ISLNK(found.st_mode):
                    break
            else:
                return path, found
        except OSError:
            pass  # (missing, unreadable: os.path.realpath says what it resolves to)
        break
    return os.path.realpath(path), None
