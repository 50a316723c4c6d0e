"""Another process's parent, start time and command line: how an agent finds the git-lfs process
that started it and what that process was asked to do.

Linux reads /proc/<pid>/stat and /proc/<pid>/cmdline (no process started); macOS and the BSDs
ask `ps`; elsewhere the answer is None (unknown). Only `os` and `sys` at import: agents read
this before their first object. This is the one place in the package that reads /proc for
processes.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms per agent start
if TYPE_CHECKING:
    from collections.abc import Callable


class ProcessInfo:
    """One process: `name` is its short name (Linux: the kernel's comm, at most 15 bytes; else
    the base name of argv[0]); `start` is opaque, equal only for the same process."""

    __slots__ = ("argv", "name", "pid", "ppid", "start")

    def __init__(self, pid: int, ppid: int, name: str, start: str, argv: list[str]) -> None:
        self.pid, self.ppid, self.name, self.start, self.argv = pid, ppid, name, start, argv


def _from_proc(pid: int, with_argv: bool) -> ProcessInfo | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat_file:
            stat = stat_file.read()
        argv: list[str] = []
        if with_argv:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                argv = [os.fsdecode(arg) for arg in cmdline.read().split(b"\0")[:-1]]
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]  # (the name may hold spaces and parentheses)
    fields = stat[stat.rindex(")") + 2 :].split()
    return ProcessInfo(pid, int(fields[1]), name, fields[19], argv)  # fields 4 and 22 of stat


def _from_ps(pid: int) -> ProcessInfo | None:
    """`ps -ww -o ppid=,lstart=,args= -p PID`: lstart is five words ("Fri Nov 27 12:48:19 2026");
    args are split at spaces (ps joins them so), enough to tell a command's name and options.
    `-ww`: without it ps cuts its line at 80 columns when its output is not a terminal, and a
    long path to git-lfs lost its name."""
    import subprocess

    try:
        out = subprocess.run(["ps", "-ww", "-o", "ppid=,lstart=,args=", "-p", str(pid)], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) < 7 or not words[0].isdigit():
        return None
    argv = words[6:]
    return ProcessInfo(pid, int(words[0]), os.path.basename(argv[0]), " ".join(words[1:6]), argv)


def read_process(pid: int, *, with_argv: bool = True, may_spawn: bool = True) -> ProcessInfo | None:
    """The process `pid`, or None when it is gone or this OS cannot tell. `may_spawn=False`:
    only what costs no process (None where that needs `ps`)."""
    system: str = sys.platform  # (a str to mypy, which assumes the platform it runs on)
    if system.startswith("linux"):
        return _from_proc(pid, with_argv)
    if may_spawn and (system == "darwin" or "bsd" in system):
        return _from_ps(pid)
    return None


def find_ancestor(start: int, read: Callable[[int], ProcessInfo | None], wanted: Callable[[ProcessInfo], bool], levels: int) -> ProcessInfo | None:
    """The first of `start` and its ancestors (at most `levels` processes) that is `wanted`;
    None when there is none, or when `read` cannot tell on the way."""
    pid = start
    for _ in range(levels):
        info = read(pid)
        if info is None:
            return None
        if wanted(info):
            return info
        if info.ppid <= 1:
            return None
        pid = info.ppid
    return None


def is_git_lfs(info: ProcessInfo) -> bool:
    return info.name.startswith("git-lfs")


def git_lfs_ancestor(*, with_argv: bool = True, may_spawn: bool = True) -> ProcessInfo | None:
    """The git-lfs process above this one: git-lfs runs an agent through `sh -c`, launch.sh
    adds a shell, so it is at most four processes up. None when there is none or the OS cannot tell."""
    return find_ancestor(os.getppid(), lambda pid: read_process(pid, with_argv=with_argv, may_spawn=may_spawn), is_git_lfs, 4)
