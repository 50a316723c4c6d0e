"""The storage layer's errors: what went wrong, in storage terms.

Nothing here knows HTTP. The layers above translate these at their boundary: the server maps
each class to a status and a stable `code` in one table (server/errors.py), and the in-process
backends turn them into the client errors the HTTP backend raises for the same case
(client/local_backend.py).

    StorageError            base (a XetError)
      Rejected              an uploaded object or a query is invalid or inconsistent
        MissingXorbs        it references xorbs the store does not hold
        TooMuchWork         validating it would cost more than it may
      Conflict              it contradicts what happened meanwhile (gc collected a xorb it uses)
      Damaged               stored data is missing or no longer verifies
      Unavailable           a part of the store cannot be reached now: try again later
      StorageFull           no space left where the store writes
      QuotaExceeded         the push would take a repository past the quota its operator set
      Misconfigured         the store cannot be opened as configured (version, index URL, extras)
"""

from __future__ import annotations

import errno
import sqlite3

from ..core.errors import XetError


class StorageError(XetError):
    """The store refuses or fails an operation; `message` says what happened and what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Rejected(StorageError, ValueError):
    """An uploaded object or a query is invalid or inconsistent: sending it again cannot help."""


class MissingXorbs(Rejected):
    """A shard references xorbs the store does not hold (a client that deduplicated against a
    cache of what the store once held uploads them again)."""


class TooMuchWork(Rejected):
    """Validating the upload would cost far more than its size justifies: split it."""


class Conflict(StorageError):
    """The upload contradicts what happened to the store meanwhile (a xorb it uses was
    collected as unused before it arrived): upload it again."""


class Damaged(StorageError):
    """Data the index promises is missing or no longer verifies: the operator must repair the store."""


class Unavailable(StorageError):
    """A part of the store (index database, object storage) cannot be reached now: retry later."""


class StorageFull(StorageError):
    """No space (or quota) left where the store writes."""


class QuotaExceeded(StorageError):
    """A push would take a repository's logical bytes past the quota its operator set (the
    figures, in bytes, for callers; quota_exceeded makes one with the message users see)."""

    def __init__(self, message: str, quota: int = 0, used: int = 0, adding: int = 0) -> None:
        super().__init__(message)
        self.quota, self.used, self.adding = quota, used, adding


def quota_exceeded(repo: str, quota: int, used: int, adding: int) -> QuotaExceeded:
    """The refusal of a registration that would take `repo` past its quota: names the quota, the
    usage, what the push adds, which bytes count, and what to do."""
    return QuotaExceeded(
        f"repository {repo} is over its quota: {_size(quota)} allowed, {_size(used)} held, this push adds {_size(adding)} "
        "(logical bytes: the sizes of its files); delete files from it, or ask the operator to raise the quota",
        quota,
        used,
        adding,
    )


def _size(n: int) -> str:
    """A byte count as people read it, exact for small ones (a quota message names both)."""
    if n < 10 * 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit} ({n} bytes)"


class Misconfigured(StorageError):
    """The store cannot be opened as configured (a newer format, an unknown index, a missing extra)."""


def read_only_store(root: object) -> Misconfigured:
    """The refusal of a write to a store this process may only read."""
    return Misconfigured(
        f"the store at {root} is read-only here (this user cannot write it, or it is on a read-only mount): "
        "reading works, writing (a push) needs write access to it"
    )


_SQLITE_FULL = 13  # sqlite3.SQLITE_FULL, which Python 3.10 does not define


def is_disk_full(exc: BaseException) -> bool:
    """No space (or quota) left: for files, and for SQLite's index."""
    if isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
