"""Refuse `git lfs prune --verify-remote` when the XET store lacks what prune would delete.

With a standalone agent git-lfs answers the batch itself ("the agent can do everything"), and
prune's verification is a dry run that gives the agent no object: every object counts as
"verified with remote", and prune deletes local copies the store never received (a push with
GIT_LFS_SKIP_PUSH=1 or --no-verify, a store that lost objects). The one answer git-lfs waits
for is the agents' `init`: refused, the verification fails, nothing counts as verified and
prune halts ("These objects to be pruned are missing on remote") with nothing deleted
(git-lfs 3.3.0 and 3.6.1, commands/command_prune.go).

So a download `init` from a git-lfs process that prunes (`git lfs prune`, or `git lfs fetch
--prune` with lfs.pruneverifyremotealways) is answered only after asking the store about every
object prune would delete, as `git lfs prune --dry-run --verbose --no-verify-remote` lists them.
As git-lfs does, an unreachable object counts only with --verify-unreachable. The verdict is
kept for the other agents of the same git-lfs process (a file under <git-common-dir>/lfs/tmp,
which git-lfs removes once an hour old). Where the OS does not say which process started the
agent (platform/processes.py), nothing is checked: only Hub mode verifies there.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from ..core.errors import XetError
from ..platform.gitcmd import run_git
from ..platform.processes import ProcessInfo, git_lfs_ancestor
from .endpoints import git_common_dir, git_config

# Set for the git-lfs commands the check runs: their agents (if any) must not check again.
NESTED = "GIT_XET_PRUNE_CHECK"
_OID_LINE = re.compile(r"^\s*\*\s+([0-9a-f]{64})\s+\(", re.MULTILINE)
_TRUE = ("true", "yes", "on", "1")
_NAMED = 3  # oids named in a refusal


class PruneCall(NamedTuple):
    """What a git-lfs command line says about pruning: the prune options that change the set
    of prunable objects, whether unreachable objects are verified too (None: as configured),
    and whether verification depends on lfs.pruneverifyremotealways (fetch --prune)."""

    options: tuple[str, ...]
    verify_unreachable: bool | None
    verifies_if_configured: bool


def _short_flags(arg: str) -> str:
    """The letters of a cluster of short flags ("-fc" -> "fc"), "" for anything else."""
    return arg[1:] if arg.startswith("-") and not arg.startswith("--") else ""


def prune_call(argv: Sequence[str]) -> PruneCall | None:
    """How the git-lfs process with this argv prunes; None when it does not."""
    if len(argv) < 2:
        return None
    args = list(argv[2:])
    if "--" in args:
        args = args[: args.index("--")]
    if argv[1] == "fetch":
        if any(arg == "--prune" or "p" in _short_flags(arg) for arg in args):
            return PruneCall((), None, True)
        return None
    if argv[1] != "prune":
        return None
    options = []
    if "--recent" in args:
        options.append("--recent")
    if any(arg == "--force" or "f" in _short_flags(arg) for arg in args):
        options.append("--force")
    unreachable = None
    for arg in args:  # the last one given wins, as for git-lfs's flags
        if arg in ("--verify-unreachable", "--no-verify-unreachable"):
            unreachable = arg == "--verify-unreachable"
    return PruneCall(tuple(options), unreachable, False)


def prunable_oids(dry_run_output: str) -> list[str]:
    """The oids `git lfs prune --dry-run --verbose` lists (" * <oid> (<size>)"), each once, in
    order. (Its progress output redraws lines with carriage returns and repeats the last one.)"""
    return list(dict.fromkeys(_OID_LINE.findall(dry_run_output.replace("\r", "\n"))))


def reachable_oids(ls_files_output: str) -> set[str]:
    """The oids `git lfs ls-files --all --long` lists ("<oid> <*|-> <path>")."""
    return {line.split()[0] for line in ls_files_output.splitlines() if re.match(r"[0-9a-f]{64}\s", line)}


class CheckFailed(XetError):
    """The store, or git-lfs, could not answer; the message says why."""


def _git_lfs(*args: str) -> str:
    """`git lfs ARGS` with its whole progress output: without a terminal git-lfs prints only the
    last line of each task, and prune's dry run only the last object it would delete."""
    out = run_git("lfs", *args, env={**os.environ, NESTED: "1", "GIT_LFS_FORCE_PROGRESS": "1"}, timeout=600)
    if out.returncode != 0:
        raise CheckFailed(f"`git lfs {' '.join(args)}` failed: {(out.stderr or out.stdout).strip()[:300]}")
    return out.stdout + out.stderr


def _local_size(media_dir: Path, oid: str) -> int:
    return (media_dir / oid[:2] / oid[2:4] / oid).stat().st_size


def _media_dir() -> Path:
    """Where git-lfs keeps this repository's objects (`git lfs env`: LocalMediaDir)."""
    for line in _git_lfs("env").splitlines():
        if line.startswith("LocalMediaDir="):
            return Path(line.split("=", 1)[1])
    raise CheckFailed("`git lfs env` names no LocalMediaDir")


def _configured(key: str) -> bool:
    return (git_config(key) or "").lower() in _TRUE


def unsafe_to_prune(call: PruneCall, remote: str | None) -> str | None:
    """Ask the store about what prune would delete: None when it holds all of it, else why
    prune must stop (the refusal git-lfs shows)."""
    from .routing import StoreRouter

    where = remote or "origin"
    try:
        oids = prunable_oids(_git_lfs("prune", "--dry-run", "--verbose", "--no-verify-remote", *call.options))
        if not oids:
            return None
        media = _media_dir()
        absent = StoreRouter(remote).missing([(oid, _local_size(media, oid)) for oid in oids])
        unreachable = call.verify_unreachable
        if unreachable is None:
            unreachable = _configured("lfs.pruneverifyunreachablealways")
        if absent and not unreachable:  # as git-lfs: a missing unreachable object does not stop prune
            reachable = reachable_oids(_git_lfs("ls-files", "--all", "--long"))
            absent = [oid for oid in absent if oid in reachable]
    except (XetError, OSError) as exc:  # prune must not go on unverified
        return (
            f"git-xet: cannot check that the XET store holds what `git lfs prune` would delete ({exc}); "
            "nothing is deleted. Run `git xet doctor`, then prune again"
        )
    if not absent:
        return None
    named = ", ".join(oid[:12] for oid in absent[:_NAMED]) + (", ..." if len(absent) > _NAMED else "")
    return (
        f"git-xet: {len(absent)} of the {len(oids)} objects `git lfs prune` would delete are not in the XET store ({named}); "
        f"nothing is deleted. Upload them with `git lfs push --all {where}` (the agent sends them to the store), then prune again"
    )


def _verdict_file(lfs: ProcessInfo) -> Path:
    return git_common_dir() / "lfs" / "tmp" / f"git-xet-prune-check-{lfs.pid}-{lfs.start}"


def refusal(operation: str, remote: str | None) -> str | None:
    """What to refuse a download `init` with because its git-lfs process prunes objects the
    store lacks; None: answer it. Known once per git-lfs process, kept for its later agents."""
    if operation != "download" or os.environ.get(NESTED):
        return None
    lfs = git_lfs_ancestor()
    call = None if lfs is None else prune_call(lfs.argv)
    if lfs is None or call is None:
        return None  # not a prune, or this OS cannot tell (the docs name that limit)
    if call.verifies_if_configured and not _configured("lfs.pruneverifyremotealways"):
        return None  # fetch --prune that does not verify: nothing to protect here
    try:
        verdict_file = _verdict_file(lfs)
        return verdict_file.read_text(encoding="utf-8") or None
    except FileNotFoundError:
        pass
    except (XetError, OSError) as exc:
        return f"git-xet: cannot tell which repository `git lfs prune` runs in ({exc}); nothing is deleted"
    verdict = unsafe_to_prune(call, remote)
    if verdict is not None:
        # git-lfs (3.3.0, 3.6.1) keeps a refused init to itself in prune: it says only "These
        # objects to be pruned are missing on remote". The why and the fix go to the terminal.
        from .terminal import tell

        tell(verdict.removeprefix("git-xet: "))
    try:
        verdict_file.parent.mkdir(parents=True, exist_ok=True)
        partial = verdict_file.with_name(verdict_file.name + f".{os.getpid()}")
        partial.write_text(verdict or "", encoding="utf-8")
        partial.replace(verdict_file)
    except OSError:
        pass  # the next agent asks again
    return verdict
