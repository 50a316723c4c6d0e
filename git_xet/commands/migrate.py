"""`git xet migrate DIR s3://BUCKET[/PREFIX]`: copy a directory store's objects into a bucket.

Two targets:
- for a server (default): the xorbs and shards of `git xet serve --data DIR` (or of a
  directory store) go to the bucket under the same keys; the index stays in DIR, so the server
  then runs as `git xet serve --data DIR --objects s3://...`.
- `--standalone`: a serverless bucket store (see client/bucket_backend.py): the xorbs, then
  every shard is registered through the bucket backend, which writes the name entries
  (files/, lfs/, dedup/) after the objects they point at.

Copies are conditional (`If-None-Match: *`), so a migration can be interrupted and run again,
and a target that already holds objects keeps them. Nothing is deleted from DIR.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
import sys
from typing import TYPE_CHECKING

from ..core.errors import XetError

if TYPE_CHECKING:
    import argparse

    from ..storage.objects import DirectoryObjectStore

PARALLEL = 8


@dataclass
class MigrationResult:
    copied: int = 0
    already_there: int = 0
    bytes_copied: int = 0
    shards_registered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


class MigrationError(XetError):
    """The migration cannot go on; the message says why and what to do."""


def _shards_in_index(source: Path) -> Iterator[bytes]:
    """The shards the source's index keeps in their rows (small ones; see CasStore)."""
    from ..storage.index_sqlite import SqliteIndex

    if not (source / "index.sqlite").is_file():
        return
    index = SqliteIndex(source / "index.sqlite")
    try:
        for shard_id in sorted(index.shard_ids()):
            body = index.shard_body(shard_id)
            if body is not None:
                yield body
    finally:
        index.close()


def _objects_under(source: DirectoryObjectStore, prefix: str) -> Iterator[str]:
    """The key of every stored object under `prefix` (files and packed rows; never a writer's
    temp file)."""
    for key, _mtime in source.list(f"{prefix}/"):
        yield key


def migrate(source: Path, target: str, *, standalone: bool = False, progress: Callable[[str], None] = lambda _line: None) -> MigrationResult:
    from ..client.bucket_backend import BucketBackend, create_bucket_store, open_bucket_objects
    from ..client.errors import TransferError
    from ..storage.objects import DirectoryObjectStore
    from ..storage.s3 import S3Error

    if not (source / "index.sqlite").is_file() and not (source / "xorbs").is_dir():
        raise MigrationError(f"{source} is not a git-xet data directory or directory store (no index.sqlite, no xorbs/)")
    result = MigrationResult()
    objects = DirectoryObjectStore(source)
    try:
        bucket = open_bucket_objects(target)
        bucket.check()
        if standalone:
            create_bucket_store(bucket)

        def copy(key: str) -> None:
            body = objects.read(key)
            created = bucket.put_new(key, body)
            with result.lock:
                if created:
                    result.copied += 1
                    result.bytes_copied += len(body)
                else:
                    result.already_there += 1

        prefixes = ("xorbs",) if standalone else ("xorbs", "shards")
        with ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="git-xet-migrate") as pool:
            for prefix in prefixes:
                list(pool.map(copy, _objects_under(objects, prefix)))
                progress(f"{prefix}: {result.copied} copied, {result.already_there} already in {target}")
        if standalone:
            backend = BucketBackend(bucket)
            for key in _objects_under(objects, "shards"):
                backend.upload_shard(objects.read(key))
                result.shards_registered += 1
            for body in _shards_in_index(source):
                backend.upload_shard(body)
                result.shards_registered += 1
            progress(f"shards: {result.shards_registered} registered")
    except (S3Error, TransferError) as exc:
        raise MigrationError(f"{getattr(exc, 'message', None) or exc}; run the migration again once fixed (it resumes)") from None
    finally:
        objects.close()
    return result


def cmd_migrate(args: argparse.Namespace) -> int:
    try:
        result = migrate(args.source, args.target, standalone=args.standalone, progress=print)
    except MigrationError as exc:
        print(f"git-xet migrate: {exc}", file=sys.stderr)
        return 1
    print(f"copied {result.copied} objects ({result.bytes_copied} bytes); {result.already_there} were in {args.target} already")
    if args.standalone:
        print(f"registered {result.shards_registered} shards; use it with `git xet install --standalone {args.target}`")
    else:
        print(f"now run the server as: git xet serve --data {args.source} --objects {args.target}")
    return 0
