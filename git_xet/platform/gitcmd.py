"""Running `git`: the one place git-xet starts a git process.

Every caller wants the same things: a bounded wait (a wedged credential helper must not hang a
push), text decoded without ever raising on odd bytes, and "git is missing or timed out" handled
like any other failure instead of as a traceback. Importing this is cheap (subprocess only), so
the agent may use it on its start-up path.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple
# The returncode reported when git could not be run at all (missing, or timed out).
DEFAULT_TIMEOUT = 60.0
NOT_RUN = -1


class GitResult(NamedTuple):
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def value(self) -> str | None:
        """The stripped output of a successful command, None on failure or empty output
        (what `git config --get` means by "unset")."""
        return (self.stdout.strip() or None) if self.ok else None


def run_git(
    *args: str,
    cwd: Path | str | None = None,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    capture: bool = True,
) -> GitResult:
    """Run `git ARGS...`. With `capture=False` git talks to the terminal itself (clone,
    checkout: the user sees its progress and messages). A git that cannot be started or
    exceeds `timeout` gives returncode NOT_RUN and the reason as stderr."""
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            input=input,
            env=dict(env) if env is not None else None,
            capture_output=capture,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return GitResult(NOT_RUN, "", f"git {args[0] if args else ''} did not finish within {timeout:g} s")
    except OSError as exc:
        return GitResult(NOT_RUN, "", f"cannot run git: {exc}")
    return GitResult(proc.returncode, proc.stdout or "", proc.stderr or "")


def config_list(*scope: str, cwd: Path | str | None = None) -> list[tuple[str, str]]:
    """Every (key, value) of `git config [SCOPE] --list -z`, in git's order (later entries win
    for single-valued keys); [] when git cannot answer. Keys are as git prints them: section and
    variable lower-cased, the subsection as written."""
    result = run_git("config", *scope, "--list", "-z", cwd=cwd)
    if not result.ok:
        return []
    entries = []
    for entry in result.stdout.split("\0"):
        key, _, value = entry.partition("\n")
        if key:
            entries.append((key, value))
    return entries


def config_list_scoped(cwd: Path | str | None = None) -> list[tuple[str, str, str]]:
    """Every (scope, key, value) of `git config --show-scope --list -z` (scope: system, global,
    local, worktree or command), in git's order; [] when git cannot answer."""
    result = run_git("config", "--show-scope", "--list", "-z", cwd=cwd)
    if not result.ok:
        return []
    fields = result.stdout.split("\0")
    entries = []
    for scope, entry in zip(fields[0::2], fields[1::2], strict=False):
        key, _, value = entry.partition("\n")
        if key:
            entries.append((scope, key, value))
    return entries
