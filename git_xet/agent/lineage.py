"""Which git-lfs process an agent works for: the id under which a push's agents meet (the push
summary's log, the fork server's socket). Only `os` (platform.processes): the agent reads it before its first object.

git-lfs runs each agent through `sh -c`, so the git-lfs process is the agent's parent's parent;
its start time is part of the id, so a reused pid is a different command. A worker forked for
an agent (fork_server.py) is not the agent's descendant: it adopts the agent's id instead.
"""

from __future__ import annotations

from ..platform.processes import git_lfs_ancestor, read_process

_adopted: str | None = None


def lfs_process_id(may_spawn: bool = False) -> str | None:
    """`<pid>-<start time>` of the git-lfs process above this one, or None when there is none
    or the OS cannot tell; without /proc (macOS, BSD) only when `may_spawn` lets it ask `ps`,
    which costs a process start: the fork server's socket does without, a push summary not."""
    if _adopted is not None:
        return _adopted
    found = git_lfs_ancestor(with_argv=False, may_spawn=may_spawn)
    return None if found is None else f"{found.pid}-{found.start}"


def adopt(process_id: str) -> None:
    """Answer `process_id` from now on: this process serves an agent of that git-lfs process."""
    global _adopted
    _adopted = process_id


def lfs_argv() -> list[str] | None:
    """The command line of the git-lfs process this agent works for (prefetch.py guesses its
    queue from it), or None when the OS cannot tell or that process is gone."""
    if _adopted is not None:
        pid, _, start = _adopted.partition("-")
        found = read_process(int(pid))
        return found.argv if found is not None and found.start == start else None
    found = git_lfs_ancestor()
    return None if found is None else found.argv
