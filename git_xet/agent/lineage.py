"""Which git-lfs process an agent works for: the id under which a push's agents meet (the push
summary's log, the fork server's socket). Only `os`: the agent reads it before its first object.

git-lfs runs each agent through `sh -c`, so the git-lfs process is the agent's parent's parent;
its start time is part of the id, so a reused pid is a different command. A worker forked for
an agent (fork_server.py) is not the agent's descendant: it adopts the agent's id instead.
"""

from __future__ import annotations

import os

_adopted: str | None = None


def lfs_process_id() -> str | None:
    """`<pid>-<start time>` of the git-lfs process above this one (at most three levels up),
    or None when there is none or /proc cannot tell."""
    if _adopted is not None:
        return _adopted
    pid = os.getppid()
    for _ in range(3):
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat_file:
                stat = stat_file.read()
        except OSError:
            return None
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        if name.startswith("git-lfs"):
            return f"{pid}-{fields[19]}"  # field 22 of stat: start time
        pid = int(fields[1])  # the parent's parent
    return None


def adopt(process_id: str) -> None:
    """Answer `process_id` from now on: this process serves an agent of that git-lfs process."""
    global _adopted
    _adopted = process_id
