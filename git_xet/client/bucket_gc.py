"""Reachability gc on the serverless bucket store (`git xet gc --bucket s3://BUCKET[/PREFIX]`).

A bucket store has no index and no repositories: every machine that can write the bucket adds
content-addressed objects, and a name (lfs/, files/, dedup/) may be written by anyone, once. So
there is nothing to delete a repository or a file from: names are never removed, and neither are
the shards they point at (that would break every clone's history). What gc takes back is what no
shard references: the xorbs of pushes that died before their shard was written, last written
longer ago than the grace period. (`git xet repo delete|prune` need a server's index; on a
bucket store they are refused by having no --bucket form.)

A concurrent push may reuse such a xorb (its upload finds it stored and skips it), and S3 has no
delete conditional on what other keys hold, so removal is done so that either side sees the
other's write:
- gc moves a candidate aside (copy to gc-trash/, then delete the original), and only AFTER all
  its deletions lists the shards again; a xorb some shard now names is put back;
- a push writes its shard and only AFTER that checks again that every xorb it names is stored
  (BucketBackend.upload_shard); if one is gone it raises MissingXorbsError before writing any
  name, and the Uploader uploads the files again (its store reset): the xorb goes up anew.
If the push's shard is written before gc's second listing, gc puts the xorb back; if after, the
push's check (later still) sees the xorb gone. A reader may meet the xorb missing for the
moment between the two (a retry finds it). A gc that dies between moving and deciding leaves
the copies under gc-trash/; the next run decides them the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ..core import hashes
from ..core.errors import FormatError
from ..core.shard import parse_shard
from ..storage.cas_store import CasStore
from ..storage.s3 import ObjectTooLarge, S3ObjectStore
from .bucket_backend import MAX_SHARD_BYTES, BucketStoreError, _check_marker

log = logging.getLogger("git_xet.bucket")

TRASH = "gc-trash/"


@dataclass
class BucketGcReport:
    shards: int = 0  # shards read
    xorbs: int = 0  # xorbs listed
    removed: list[str] = field(default_factory=list)  # xorb keys removed (or that a dry run would remove)
    restored: list[str] = field(default_factory=list)  # moved aside, then put back: a push named them meanwhile
    freed_bytes: int = 0  # bytes of the removed xorbs


def _shard_xorbs(objects: S3ObjectStore, key: str) -> set[str]:
    """The xorbs (hex) a stored shard names, in its file terms and its CAS blocks. A shard that
    cannot be read stops gc: what it references is unknown, so nothing could be removed safely."""
    try:
        shard = parse_shard(objects.read_bounded(key, MAX_SHARD_BYTES))
    except FileNotFoundError:
        return set()
    except (FormatError, ObjectTooLarge) as exc:
        raise BucketStoreError(f"gc stopped: {objects.location}/{key} is not a readable shard ({exc}); remove or restore it, then run gc again") from None
    named = {t.xorb_hash for f in shard.files for t in f.terms} | {c.xorb_hash for c in shard.cas}
    return {hashes.hash_to_hex(x) for x in named}


class _Referenced:
    """The xorbs the bucket's shards name; `refresh` reads only the shards listed since."""

    def __init__(self, objects: S3ObjectStore) -> None:
        self.objects = objects
        self.read: set[str] = set()
        self.xorbs: set[str] = set()

    def refresh(self) -> set[str]:
        for key, _mtime in self.objects.list("shards/"):
            if key.endswith(".mdb") and key not in self.read:
                self.xorbs |= _shard_xorbs(self.objects, key)
                self.read.add(key)
        return self.xorbs


def _xorb_hex(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    return name if hashes.is_hash_hex(name) and key == CasStore.xorb_key(name) else None


def _move_aside(objects: S3ObjectStore, key: str, cutoff: float) -> int | None:
    """Copy the xorb to gc-trash/ and delete it, if it was last written before `cutoff` (read
    again now: a push that re-uploaded it keeps it); its size, or None when kept."""
    mtime = objects.modified(key)
    if mtime is None or not mtime <= cutoff:
        return None
    try:
        body = objects.read(key)
    except FileNotFoundError:
        return None
    objects.put(TRASH + key, body)
    objects.delete(key)
    return len(body)


def _decide(objects: S3ObjectStore, trashed: Iterable[str], referenced: set[str], report: BucketGcReport) -> None:
    """Put back each moved xorb a shard now names; drop the others' copies (freed)."""
    for trash_key in trashed:
        key = trash_key.removeprefix(TRASH)
        xorb = _xorb_hex(key)
        if xorb is not None and xorb in referenced:
            try:
                objects.put_new(key, objects.read(trash_key))  # False: a push stored it again first
            except FileNotFoundError:
                continue  # another gc run decided it already
            report.restored.append(key)
            log.info("gc: put back %s: a push named it while gc ran", key)
        objects.delete(trash_key)


def collect_bucket_garbage(
    objects: S3ObjectStore,
    grace_seconds: float,
    dry_run: bool = False,
    now: float | None = None,
    progress: Callable[[str], None] | None = None,
) -> BucketGcReport:
    """Remove the xorbs no shard names that were last written more than `grace_seconds` ago
    (see the module docstring for why a racing push never loses one)."""
    _check_marker(objects)
    cutoff = (time.time() if now is None else now) - grace_seconds
    report = BucketGcReport()
    listing = list(objects.list_entries("xorbs/"))  # listed BEFORE the shards are read
    leftovers = [key for key, _ in objects.list(TRASH)]  # a crashed run's, decided below
    referenced = _Referenced(objects)
    named = referenced.refresh()
    report.xorbs = len(listing)
    candidates = [(key, size) for key, size, mtime in listing if mtime <= cutoff and (x := _xorb_hex(key)) is not None and x not in named]
    if progress is not None:
        progress(f"{len(referenced.read)} shards name {len(named)} xorbs; {len(candidates)} of {len(listing)} stored xorbs are older than the grace and unnamed")
    moved: list[str] = []
    for key, size in candidates:
        if dry_run:
            report.removed.append(key)
            report.freed_bytes += size
            continue
        freed = _move_aside(objects, key, cutoff)
        if freed is not None:
            moved.append(key)
            report.freed_bytes += freed
    if not dry_run:
        named = referenced.refresh()  # AFTER every deletion: a shard written since is seen
        _decide(objects, leftovers + [TRASH + key for key in moved], named, report)
        back = set(report.restored)
        report.removed = [key for key in moved if key not in back]
        report.freed_bytes -= sum(size for key, size in candidates if key in back)
    report.shards = len(referenced.read)
    for key in report.removed:
        log.info("gc: %s %s", "would remove" if dry_run else "removed", key)
    return report
