"""Deleting a repository or some of its files, undoably for a retention period.

A deletion moves the repository's file and oid rows into the index's trash: from then on the
repository neither reads nor lists them, but their files stay stored, and `restore` puts every
trashed row of the repository back. `purge` (run by `git xet gc`) drops trash rows older than
the retention period and unregisters the files no repository holds any more; the xorbs only
they used become unused, and gc removes those (MetadataIndex.remove_xorb_if_unreferenced:
atomic with any registration that uses them again, which is then refused with "upload it
again" or keeps the xorb, never loses it).

Pruning picks files by their Git LFS oids: the oids to keep (e.g. `git lfs ls-files --all
--long` of the canonical clone: every other file of the repository goes) or the oids to drop.
A file the repository holds without an oid (a native XET upload whose sha256 was not given)
is never pruned by a keep list: nothing says it is unwanted.
"""

from __future__ import annotations

import re
import time

from .index_base import MetadataIndex

DEFAULT_RETENTION_SECONDS = 7 * 24 * 3600
_OID = re.compile(r"^\s*([0-9a-fA-F]{64})\b")


def parse_oids(text: str) -> set[str]:
    """The sha256 oids at the start of each line: a plain list, or `git lfs ls-files --long`."""
    return {m.group(1).lower() for line in text.splitlines() if (m := _OID.match(line))}


def _now(now: float | None) -> int:
    return int(time.time() if now is None else now)


def delete_repo(index: MetadataIndex, repo: str, now: float | None = None) -> int:
    """Trash every file of `repo`; the number of files."""
    return index.trash_files(repo, None, _now(now))


def files_to_prune(index: MetadataIndex, repo: str, keep: set[str] | None = None, drop: set[str] | None = None) -> list[str]:
    """The files of `repo` that pruning with `keep` (or `drop`) oids removes: one pass over the
    repository oid mappings, O(oids in the store)."""
    if (keep is None) == (drop is None):
        raise ValueError("give the oids to keep or the oids to drop")
    kept: set[str] = set()
    dropped: set[str] = set()
    for row_repo, oid, file_hex in index.export_rows("repo_oids"):
        if row_repo != repo:
            continue
        wanted = oid in keep if keep is not None else oid not in (drop or set())
        (kept if wanted else dropped).add(file_hex)
    return sorted(dropped - kept)  # a file named by a kept oid stays


def prune_repo(index: MetadataIndex, repo: str, keep: set[str] | None = None, drop: set[str] | None = None, now: float | None = None) -> int:
    """Trash the files of `repo` that `keep` does not name (or that `drop` names); the number trashed."""
    files = files_to_prune(index, repo, keep, drop)
    return index.trash_files(repo, files, _now(now)) if files else 0


def restore_repo(index: MetadataIndex, repo: str) -> int:
    """Undo every deletion and prune of `repo` still in the trash; the number of files back."""
    return index.restore_files(repo)


def purge_preview(index: MetadataIndex, retention_seconds: float = DEFAULT_RETENTION_SECONDS, now: float | None = None) -> tuple[list[tuple[str, str]], list[str]]:
    """What `purge` would do, changing nothing (gc's --dry-run): the (repo, file) deletions
    whose retention ended, and the files it would unregister (no repository holds them, and no
    trash row younger than the retention names them). One pass over the trash, repo_files and files."""
    cutoff = _now(now) - int(retention_seconds)
    ending: set[tuple[str, str]] = set()
    still_trashed: set[str] = set()
    for repo, file_hex, oid, deleted_at in index.export_rows("trash"):
        if deleted_at > cutoff:
            still_trashed.add(file_hex)
        elif oid == "":  # the repo_files row: one per file of a deletion
            ending.add((repo, file_hex))
    held = {file_hex for _repo, file_hex in index.export_rows("repo_files")} | still_trashed
    gone = [row[0] for row in index.export_rows("files") if row[0] not in held]  # as purge_trash selects them
    return sorted(ending), sorted(gone)


def purge(index: MetadataIndex, retention_seconds: float = DEFAULT_RETENTION_SECONDS, now: float | None = None) -> int:
    """End the retention of deletions older than `retention_seconds`; the number of files
    unregistered (their unused xorbs are gc's to remove)."""
    return index.purge_trash(_now(now) - int(retention_seconds))
