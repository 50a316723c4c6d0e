"""Operator checks and cleanup over a store's objects and index: fsck and garbage collection.

fsck: every indexed xorb is present, hashes to its name and matches its indexed layout; every
registered shard is present (in the object store, or in its index row) and hashes to its id;
every file's recorded sha256 (what its Git LFS oids are checked against) is the sha256 of its
bytes, reconstructed and hashed in pieces. With `repair`, a wrong one is replaced by the
computed one and the oid mappings of the wrong one to that file are removed (see
MetadataIndex.correct_sha256): honest pushes of the file then register again, and nothing
keeps serving it under the wrong oid. Listed, not errors: orphans (objects nothing
indexes: a writer died between object and index; in a bucket, an upload grant's PUT staged
under uploads/ whose commit never came) and unused xorbs (indexed, but no registered file uses them: pushes whose shard never came).

gc: orphans and unused xorbs whose object was last written longer ago than a grace period are
removed. The grace period covers uploads under way (xorbs go up before the shard that uses
them), also of a xorb stored long ago: uploading it again rewrites it (CasStore._keep_alive). Each removal is atomic with the index's check (see MetadataIndex): a registration using a
xorb that gc removes at that moment is refused (the client uploads it again), and an orphan
re-uploaded as it is removed is written back by its uploader (CasStore._index_xorb).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core import hashes
from ..core.errors import FormatError, XetError
from ..core.shard import parse_shard
from ..core.xorb import verify_xorb
from .cas_store import STAGED_UPLOADS, CasStore

log = logging.getLogger("git_xet.storage")

DEFAULT_GRACE_SECONDS = 24 * 3600


SHA256_PROGRESS_BYTES = 1 << 30  # how often the sha256 pass reports progress


class WrongSha256(NamedTuple):
    file_hex: str
    recorded: str
    actual: str


@dataclass
class FsckReport:
    xorbs: int = 0  # indexed xorbs checked
    shards: int = 0  # registered shards checked
    files: int = 0  # files with a recorded sha256, rehashed
    problems: list[str] = field(default_factory=list)  # indexed objects missing or invalid
    wrong_sha256: list[WrongSha256] = field(default_factory=list)  # also in problems
    repaired: list[WrongSha256] = field(default_factory=list)  # corrected (fsck's `repair`)
    unmapped: int = 0  # oid mappings of wrong sha256s removed by the repair
    orphans: list[str] = field(default_factory=list)  # object keys nothing indexes
    unused: list[str] = field(default_factory=list)  # indexed xorbs no registered file uses

    @property
    def ok(self) -> bool:
        return not self.problems


def _xorb_name(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    return name if key.startswith("xorbs/") and hashes.is_hash_hex(name) else None


def _shard_id(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    return name.removesuffix(".mdb") if key.startswith("shards/") and name.endswith(".mdb") else None


def _staged(key: str) -> bool:
    """A grant's staged upload (uploads/<xorb>/<grant id>), as only a bucket store has."""
    return key.startswith(STAGED_UPLOADS) and key.count("/") == 2


def _check_xorb(store: CasStore, xorb_hex: str) -> str | None:
    """What is wrong with an indexed xorb's object, or None."""
    key = store.xorb_key(xorb_hex)
    try:
        data = store.objects.read(key)
    except FileNotFoundError:
        return f"xorb {xorb_hex}: indexed but missing from the object store"
    try:
        verified = verify_xorb(data, hashes.hex_to_hash(xorb_hex))
    except FormatError as exc:
        return f"xorb {xorb_hex}: damaged ({exc})"
    layout = store.xorb_layout(xorb_hex)
    if layout is None or (tuple(verified.chunk_hashes), tuple(verified.byte_ends)) != (layout.chunk_hashes, layout.byte_ends):
        return f"xorb {xorb_hex}: the stored object's chunks differ from its indexed layout"
    return None


def _check_shard(store: CasStore, shard_id: str) -> str | None:
    try:
        body = store.shard_bytes(shard_id)
    except FileNotFoundError:
        return f"shard {shard_id}: registered but missing from the object store"
    if hashes.hash_to_hex(hashes.keyed_hash(bytes(32), body)) != shard_id:
        return f"shard {shard_id}: its bytes do not hash to its id"
    try:
        parse_shard(body)
    except FormatError as exc:
        return f"shard {shard_id}: unreadable ({exc})"
    return None


def _check_sha256s(store: CasStore, report: FsckReport, bad_xorbs: set[str], progress: Callable[[str], None] | None) -> None:
    """Rehash every file that has a recorded sha256, from its bytes as a download gets them
    (each chunk checked against its hash), one piece in memory at a time; files using a xorb
    reported already (`bad_xorbs`) are skipped: that problem is what to fix first."""
    hashed = reported = 0
    for file_hex, _size, recorded, _terms in store.index.export_rows("files"):
        if recorded is None:
            continue
        stored = store.get_file(file_hex)
        if stored is None or any(hashes.hash_to_hex(t.xorb_hash) in bad_xorbs for t in stored.terms):
            continue
        report.files += 1
        digest = hashlib.sha256()
        try:
            for piece in store.iter_file_bytes(stored):
                digest.update(piece)
                hashed += len(piece)
        except Exception as exc:  # noqa: BLE001 - whatever keeps its bytes from being read is a problem to report
            report.problems.append(f"file {file_hex}: its bytes cannot be read to check its sha256 ({exc})")
            continue
        if digest.hexdigest() != recorded:
            wrong = WrongSha256(file_hex, recorded, digest.hexdigest())
            report.wrong_sha256.append(wrong)
            report.problems.append(f"file {file_hex}: recorded sha256 {recorded} is not that of its bytes ({wrong.actual}); fix with `git xet fsck --repair`")
        if progress is not None and hashed - reported >= SHA256_PROGRESS_BYTES:
            reported = hashed
            progress(f"{report.files} files ({hashed >> 20} MiB) rehashed")


def repair_sha256s(store: CasStore, report: FsckReport) -> None:
    """Correct each wrong sha256 fsck found (see the module docstring)."""
    for wrong in report.wrong_sha256:
        report.unmapped += store.index.correct_sha256(wrong.file_hex, wrong.recorded, wrong.actual)
        report.repaired.append(wrong)
        log.info("fsck: file %s: recorded sha256 replaced by the one computed from its bytes", wrong.file_hex)


def fsck(store: CasStore, progress: Callable[[str], None] | None = None, repair: bool = False) -> FsckReport:
    """Check every indexed object (reading and hashing each), every recorded sha256, and list
    the orphans; with `repair`, correct the wrong sha256s. A staged upload of a xorb that is
    stored is not listed: a committed grant leaves one, empty, so that its URL cannot stage
    bytes again (server/grants.py); the servers' collector and gc remove it."""
    report = FsckReport()
    bad_xorbs: set[str] = set()
    for xorb_hex, _size in store.index.iter_xorbs():
        report.xorbs += 1
        problem = _check_xorb(store, xorb_hex)
        if problem:
            report.problems.append(problem)
            bad_xorbs.add(xorb_hex)
        if progress is not None and report.xorbs % 1000 == 0:
            progress(f"{report.xorbs} xorbs checked")
    shard_ids = store.index.shard_ids()
    listing = _listing(store)  # (the index read again after it: see _listing)
    for shard_id in sorted(shard_ids):
        report.shards += 1
        problem = _check_shard(store, shard_id)
        if problem:
            report.problems.append(problem)
    _check_sha256s(store, report, bad_xorbs, progress)
    if repair:
        repair_sha256s(store, report)
    indexed = {x for x, _ in store.index.iter_xorbs()}
    for key, _mtime in _orphans(listing, indexed, store.index.shard_ids()):
        if not (_staged(key) and key.split("/")[1] in indexed):  # a committed grant's marker: see the docstring
            report.orphans.append(key)
    report.unused = list(store.index.unreferenced_xorbs())
    return report


def _listing(store: CasStore) -> list[tuple[str, float]]:
    """(key, mtime) of every object gc and fsck consider, listed BEFORE the index is read: an
    object a push stores after this listing is not in it, and one it indexes after is named by
    the index read next."""
    return [entry for prefix in ("xorbs/", "shards/", STAGED_UPLOADS) for entry in store.objects.list(prefix)]


def _orphans(listing: list[tuple[str, float]], xorbs: set[str], shards: frozenset[str]) -> Iterator[tuple[str, float]]:
    """(key, mtime) of the listed objects the index (read after the listing) does not name."""
    for key, mtime in listing:
        if _xorb_name(key) is not None:
            if _xorb_name(key) not in xorbs:
                yield key, mtime
        elif _shard_id(key) is not None:
            if _shard_id(key) not in shards:
                yield key, mtime
        elif _staged(key):
            yield key, mtime  # nothing references a staged upload


class _WrittenRecently(XetError):
    """Raised inside an index transaction to keep an object that is absent or was written since
    the grace cutoff (rolling back the transaction's unindexing)."""


def _remove_if_old(store: CasStore, key: str, cutoff: float, dry_run: bool) -> None:
    """Delete `key` if its CURRENT last-modified time (read now, not the listing's) is before
    `cutoff`; else raise _WrittenRecently. An unknown time keeps the object."""
    mtime = store.objects.modified(key)
    if mtime is None or not mtime <= cutoff:
        raise _WrittenRecently(key)
    if not dry_run:
        store.objects.delete(key)


def _removed(remove: Callable[[], object]) -> bool:
    """Run one removal; False when it kept the object (written recently, or in use)."""
    try:
        return remove() is not False
    except _WrittenRecently:
        return False


def collect_garbage(store: CasStore, grace_seconds: float = DEFAULT_GRACE_SECONDS, dry_run: bool = False, now: float | None = None) -> list[str]:
    """Remove orphans and unused xorbs last written more than `grace_seconds` ago; returns
    their keys.

    What a push may still reference is never removed: the objects are listed first and the index
    read after, so an object indexed by a push under way is named; an object is removed only if
    its own last-modified time, read again just before the removal, is older than the cutoff
    (absent or unknown: kept). A xorb is removed only atomically with the index's check that it
    is still unindexed (an orphan) or still unused. A shard file is removed if its shard is
    still unregistered when the xorbs are done (a shard registered in the moment between that
    check and the removal loses only its audit copy: nothing is served from shard files). A
    staged grant upload is removed outright: nothing references it, and a commit that comes
    after answers 404, on which clients ask for a new grant. Files this store does not write
    are left alone."""
    cutoff = (time.time() if now is None else now) - grace_seconds
    listing = [(key, mtime) for key, mtime in _listing(store) if mtime <= cutoff]
    xorbs = {x for x, _ in store.index.iter_xorbs()}
    unused = set(store.index.unreferenced_xorbs())
    removed: list[str] = []

    def old(key: str) -> Callable[[], None]:
        return functools.partial(_remove_if_old, store, key, cutoff, dry_run)

    def xorb(key: str, guarded: Callable[[str, Callable[[], None]], bool]) -> Callable[[], object]:
        """The xorb's removal inside the index's check (`guarded`); a dry run checks only the time."""
        return old(key) if dry_run else functools.partial(guarded, _xorb_name(key) or key, old(key))

    candidates = list(_orphans(listing, xorbs, store.index.shard_ids()))
    for key, _ in candidates:
        if _staged(key) and _removed(old(key)):  # a commit still under way that loses it answers 404: the client asks a new grant
            removed.append(key)
    for key, _ in candidates:
        if _xorb_name(key) is not None and _removed(xorb(key, store.index.remove_xorb_if_unindexed)):
            removed.append(key)
    for key, _ in listing:
        if _xorb_name(key) in unused and _removed(xorb(key, store.index.remove_xorb_if_unreferenced)):
            removed.append(key)
    registered = store.index.shard_ids()
    for key, _ in candidates:
        shard_id = _shard_id(key)
        if shard_id is not None and shard_id not in registered and _removed(old(key)):
            removed.append(key)
    for key in removed:
        log.info("gc: %s %s", "would remove" if dry_run else "removed", key)
    return removed
