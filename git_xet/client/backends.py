"""The one place a store location becomes a backend, for the agent's router (agent/routing.py)
and the public API's open_store (pipelines/store_api.py) alike.

A location (client/location.py) is a directory store, a `git xet serve` (http/https), a bucket
store (s3), or a CAS that a Git LFS server named in its batch answer ("cas": the Hub's, or any
XET-enabled LFS server's). Which backend serves each kind, and whether it may offer our
extension, is decided here only: a `git xet serve` is asked what it offers (its capabilities),
a named CAS never is. Each backend's code (and the HTTP stack, or botocore) is imported only for
its kind: git-lfs starts eight agents per command.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .backend import XetBackend
from .location import LocationError, StoreLocation, create_local_store, is_local_store

if TYPE_CHECKING:
    from .http_types import HttpClient
    from .tokens import TokenSource


class MissingStoreError(LocationError):
    """The location names no store yet; the message says how to make one (callers add how to
    fix the location where it came from)."""


def open_backend(
    where: StoreLocation,
    *,
    tokens: TokenSource | None = None,
    session_id: str | None = None,
    http: HttpClient | None = None,
    cache_root: Path | None = None,
    create: bool = False,
) -> XetBackend:
    """The backend for the store at `where`.

    `tokens`, `session_id`, `http`: for an HTTP store (see HttpCasBackend; a client passed in
    stays its owner's to close). `cache_root`: where a bucket store keeps the shards it read
    (default: the platform cache). `create`: make a directory or bucket a store first (never
    done by the agent: only install, clone and open_store(create=True) do). Raises
    MissingStoreError for a directory that is not a store, BucketStoreError for a bucket that
    cannot be used."""
    if where.kind == "local":
        return _directory(Path(where.location), create)
    if where.kind == "s3":
        return _bucket(where.location, cache_root, create)
    if where.kind in ("http", "cas"):
        from .http_backend import HttpCasBackend

        # A `git xet serve` may offer our extension; a CAS an LFS server named is used through XET alone.
        return HttpCasBackend(where.location, tokens, session_id=session_id, http=http, extension=where.kind == "http")
    raise LocationError(f"unknown kind of store location: {where.kind!r}")


def _directory(path: Path, create: bool) -> XetBackend:
    if create:
        create_local_store(path)
    elif not is_local_store(path):
        raise MissingStoreError(f"the XET store {path} does not exist; create it with `git xet install --standalone {path}`")
    from .local_backend import LocalStoreBackend

    return LocalStoreBackend(path)


def _bucket(location: str, cache_root: Path | None, create: bool) -> XetBackend:
    """The bucket store, its marker checked (botocore is imported only here, for s3:// stores)."""
    from ..storage.s3 import S3Error
    from .bucket_backend import BucketBackend, BucketStoreError, create_bucket_store, open_bucket_objects
    from .shard_cache import default_cache_root

    try:
        objects = open_bucket_objects(location)
        if create:
            create_bucket_store(objects)
    except S3Error as exc:
        raise BucketStoreError(f"cannot use the XET store {location}: {exc.message}") from None
    bucket = BucketBackend(objects, cache_root=cache_root if cache_root is not None else default_cache_root())
    try:
        bucket.check()
    except BaseException:
        bucket.close()
        raise
    return bucket
