"""The server's metadata index: what exists and who may read it, behind one interface.

CasStore verifies objects and decides the order of writes (object durable first, then the
index); a MetadataIndex only records what CasStore has verified, each registration in one
transaction. Two implementations: SQLite in the data directory (the embedded default,
index_sqlite) and PostgreSQL (index_postgres), which any number of server replicas share.

Nothing here grows one row per chunk (the Hub's scale rule):

    xorbs          one row per xorb: its chunk hashes, byte ends and sizes packed in blobs
    files          one row per file: its terms packed (48 bytes per term), its verified sha256
    xorb_refs      which xorbs each file uses: one row per (file, xorb), what gc keeps alive
    dedup          key chunks only: each file's first chunk, and chunks whose hash makes them
                   eligible for global dedup (~1 in 1024)
    shards         one row per accepted shard
    repo_files, repo_oids, repo_shards   per repo: files it registered, its Git LFS oids
    revoked_tokens user token ids put on the revocation list
    locks          Git LFS file locks: one per (repo, path), the unique key that decides races
    trash          repo_files and repo_oids rows of deleted repositories and pruned files, kept
                   for the retention period (restorable; their files stay stored till then)
    quotas         per repo, the most logical bytes (sum of its files' sizes) it may hold
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Collection, Iterator
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol

from ..core.hashes import XetHash, hash_to_hex, hex_to_hash
from ..core.shard import FileTerm
from ..core.xorb import XorbLayout

DEFAULT_REPO = "default"
# Tables every index holds (stats() counts each), in the order they are described above.
TABLES = ("xorbs", "files", "xorb_refs", "dedup", "shards", "repo_files", "repo_oids", "repo_shards", "revoked_tokens", "locks", "trash", "quotas")
# Each table's columns, in the order export_rows gives and import_rows takes them.
COLUMNS = {
    "xorbs": ("hash", "num_chunks", "body_size", "unpacked_size", "chunk_hashes", "byte_ends", "chunk_sizes"),
    "files": ("hash", "size", "sha256", "terms"),
    "xorb_refs": ("xorb", "file"),
    "dedup": ("chunk_hash", "xorb"),
    "shards": ("id", "size", "body"),
    "repo_files": ("repo", "file"),
    "repo_oids": ("repo", "oid", "file"),
    "repo_shards": ("repo", "id"),
    "revoked_tokens": ("id", "revoked_at"),
    "locks": ("id", "repo", "path", "owner", "ref", "locked_at"),
    "trash": ("repo", "file", "oid", "deleted_at"),  # oid "" for the repo_files row itself
    "quotas": ("repo", "max_bytes"),
}

_TERM = struct.Struct("<32sIIII")


class StoredFile(NamedTuple):
    """A file the index holds: its terms, and its sha256 once verified from the stored bytes."""

    file_hex: str
    size: int
    sha256_hex: str | None
    terms: tuple[FileTerm, ...]


class FileRegistration(NamedTuple):
    """One file of a shard, as CasStore verified it."""

    file_hex: str
    size: int
    terms: tuple[FileTerm, ...]
    computed_sha256_hex: str | None  # computed here from the bytes: recorded as the file's sha256
    oid: str | None  # the Git LFS oid to map in the repo (computed, known, or vouched for)


class NewXorb(NamedTuple):
    """A xorb stored with its shard (an upload bundle), indexed in the shard's transaction
    exactly as add_xorb(layout, body_size, before_insert) would index it."""

    layout: XorbLayout
    body_size: int
    before_insert: Callable[[], None] | None = None


class ShardRegistration(NamedTuple):
    """Everything one accepted shard adds to the index, written in one transaction."""

    shard_id: str
    size: int
    repo: str
    files: tuple[FileRegistration, ...]
    dedup: tuple[tuple[bytes, str], ...] = ()  # (key chunk hash, xorb hex)
    body: bytes | None = None  # the shard itself, kept in the index (small shards: see CasStore)
    # Xorbs stored for this shard and not indexed yet: recorded first, even when the repo has
    # registered the shard before (one commit where add_xorb and register_shard made two).
    new_xorbs: tuple[NewXorb, ...] = ()


class LockRecord(NamedTuple):
    """A Git LFS file lock (server/locks.py serves them)."""

    id: str
    repo: str
    path: str
    owner: str  # the user who took it (Claims.owner)
    ref: str | None  # the refspec git-lfs named when taking it, if any
    locked_at: int  # seconds since the epoch


class MetadataIndex(Protocol):
    """The index's contract (tests/contract/test_index_contract.py checks every implementation).

    Writes are idempotent and first-writer-wins: a xorb's layout, a file's terms, a verified
    sha256 and an oid mapping, once recorded, are never replaced. Every method is safe to call
    from many threads (and, for PostgreSQL, many processes) at once.
    """

    def add_xorb(self, layout: XorbLayout, body_size: int, before_insert: Callable[[], None] | None = None) -> bool:
        """Record a stored xorb's layout unless one is recorded; True if this call recorded it.
        `before_insert` runs first, only when the xorb is absent, while no other writer can
        record this xorb (used to replace a damaged object before indexing it)."""

    def xorb_writer_lock(self, xorb_hex: str) -> AbstractContextManager[None]:
        """Held while a xorb's object is created and indexed: one holder per xorb among every
        writer sharing the index (threads, processes, and for PostgreSQL, replicas). An object
        store's conditional create alone does not decide the winner: some S3-compatible stores
        (SeaweedFS 4.x) let two racing conditional multipart completions both succeed, the
        later replacing the object the earlier had indexed. Not held by add_xorb: it may be
        taken inside this."""

    def xorb_writer_locks(self, xorb_hexes: Collection[str]) -> AbstractContextManager[None]:
        """xorb_writer_lock of each of several xorbs (repeats allowed), held together: an upload
        bundle's xorbs are created, then indexed in its shard's transaction. Taken in one order
        that every writer shares, so that two such holders never wait for each other."""

    def remove_xorb_if_unindexed(self, xorb_hex: str, remove: Callable[[], None]) -> bool:
        """Call `remove` (delete an orphaned object) unless the xorb is indexed; True if it ran.
        Excludes add_xorb's before_insert for the same xorb, so an object being indexed is never
        collected and one being collected is restored by its indexer (see CasStore)."""

    def xorb_layout(self, xorb_hex: str) -> XorbLayout | None: ...

    def iter_xorbs(self) -> Iterator[tuple[str, int]]:
        """(xorb hex, body size) of every indexed xorb (for fsck and gc)."""

    def shard_ids(self) -> frozenset[str]: ...

    def shard_body(self, shard_id: str) -> bytes | None:
        """A registered shard's bytes when the index keeps them (ShardRegistration.body), else None."""

    def get_file(self, file_hex: str) -> StoredFile | None: ...

    def register_shard(self, shard: ShardRegistration, alongside: Callable[[Any], None] | None = None) -> bool:
        """Record a shard, all or nothing, after its new_xorbs (as add_xorb records them). False
        (and nothing new for the repo) when the repo has registered this shard before. Conflict
        if a xorb its files use is no longer indexed (collected by gc since CasStore checked it).
        QuotaExceeded (and nothing recorded) if the files new to the repo would
        take its logical bytes past its quota; checked atomically with other registrations.
        `alongside(connection)`, when the shard is new for the repo: more rows of this database
        written in the same transaction (the history's push row: one commit, not two)."""

    def unreferenced_xorbs(self) -> Iterator[str]:
        """Indexed xorbs no registered file uses (uploads whose shard never came), for gc."""

    def remove_xorb_if_unreferenced(self, xorb_hex: str, remove: Callable[[], None]) -> bool:
        """Unindex the xorb (and its dedup entries) and call `remove` (delete its object),
        atomically, unless a registered file uses it; True if it did. Excludes add_xorb's
        before_insert and registrations using this xorb."""

    def file_for_oid(self, repo: str, oid: str) -> str | None: ...

    def correct_sha256(self, file_hex: str, wrong: str, right: str) -> int:
        """Replace the file's recorded sha256 `wrong` by `right` and remove every repo's oid
        mapping of `wrong` to this file, in one transaction; the number of mappings removed.
        The one exception to first-writer-wins, for `git xet fsck --repair`: a value computed
        anew from the file's bytes and found not to match what was recorded. Nothing happens if
        the recorded value is no longer `wrong`."""

    def repo_has_file(self, repo: str, file_hex: str) -> bool: ...

    def dedup_xorbs(self, chunk: bytes, limit: int = 8) -> list[str]: ...

    def revoke_token(self, token_id: str, now: int) -> None: ...

    def revoked_token_ids(self) -> frozenset[str]: ...

    def create_lock(self, lock: LockRecord) -> tuple[LockRecord, bool]:
        """Record `lock` unless its repo has a lock on its path: (the lock, True), else (the
        existing lock, False). Of concurrent calls for one path (any replicas) exactly one wins."""

    def find_locks(
        self, repo: str, *, path: str | None = None, lock_id: str | None = None, ref: str | None = None, after: str | None = None, limit: int = 100
    ) -> list[LockRecord]:
        """The repo's locks in path order, filtered by path, id and ref (a lock taken without a
        ref matches every ref), the paths after `after` only (the next page), at most `limit`."""

    def delete_lock(self, repo: str, lock_id: str, owner: str | None) -> tuple[LockRecord | None, bool]:
        """Delete the repo's lock `lock_id` if `owner` holds it (None: whoever does, a forced
        unlock): (the lock, True); (the lock, False) if someone else holds it; (None, False)
        if there is no such lock. Atomic: a lock is deleted once."""

    def set_quota(self, repo: str, max_bytes: int | None) -> None:
        """Limit the logical bytes `repo` may hold to `max_bytes` (None: no limit). A limit below
        what it holds refuses its next push of new files; nothing is deleted."""

    def quotas(self) -> dict[str, int]:
        """Every repo's quota (repos without one are not listed)."""

    def logical_bytes(self, repo: str) -> int:
        """The sum of the sizes of the files `repo` holds: what its quota limits."""

    def trash_files(self, repo: str, files: list[str] | None, now: int) -> int:
        """Move the repo's repo_files rows of `files` (None: all of them) and their repo_oids rows
        into the trash, stamped `now`, and forget which shards the repo registered (so that a
        later push of them registers their files again); the number of files moved. The repo
        no longer reads them; they stay stored until purge_trash drops the rows."""

    def restore_files(self, repo: str) -> int:
        """Put every trash row of the repo back (undo trash_files); the number of files restored."""

    def purge_trash(self, before: int) -> int:
        """Drop the trash rows stamped at or before `before`, then unregister every file that no
        repo holds and no trash row names (its files row and xorb_refs, atomically with the check
        against registrations of it), and every shard row no repo registered; the number of files
        unregistered. Their xorbs are then unused and gc removes them."""

    def stats(self) -> dict[str, int]:
        """Rows per table (TABLES), for operators and for tests that show nothing changed."""

    def export_rows(self, table: str) -> Iterator[tuple]:
        """Every row of a table (COLUMNS order), for copying an index."""

    def import_rows(self, table: str, rows: list[tuple]) -> None:
        """Add rows (COLUMNS order) in one transaction; rows already there are kept."""

    def close(self) -> None: ...


# ---------------------------------------------------------------------- packing, shared


def pack_u32s(values: tuple[int, ...]) -> bytes:
    return struct.pack(f"<{len(values)}I", *values)


def unpack_u32s(blob: bytes) -> tuple[int, ...]:
    return struct.unpack(f"<{len(blob) // 4}I", blob)


def layout_row(layout: XorbLayout, body_size: int) -> tuple:
    """The xorbs row: hash, num_chunks, body_size, unpacked_size, hashes, byte ends, sizes."""
    return (
        layout.xorb_hex,
        len(layout.chunk_hashes),
        body_size,
        sum(layout.chunk_sizes),
        b"".join(layout.chunk_hashes),
        pack_u32s(layout.byte_ends),
        pack_u32s(layout.chunk_sizes),
    )


def layout_from_row(xorb_hex: str, blob: bytes, ends: bytes, sizes: bytes) -> XorbLayout:
    blob, ends, sizes = bytes(blob), bytes(ends), bytes(sizes)
    chunk_hashes = tuple(XetHash(blob[i : i + 32]) for i in range(0, len(blob), 32))
    return XorbLayout(hex_to_hash(xorb_hex), chunk_hashes, unpack_u32s(ends), unpack_u32s(sizes))


def xorbs_of(terms: tuple[FileTerm, ...]) -> list[str]:
    """The distinct xorbs (hex) a file's terms use, in order."""
    return list(dict.fromkeys(hash_to_hex(t.xorb_hash) for t in terms))


def pack_terms(terms: tuple[FileTerm, ...]) -> bytes:
    return b"".join(_TERM.pack(t.xorb_hash, t.cas_flags, t.unpacked_bytes, t.chunk_start, t.chunk_end) for t in terms)


def unpack_terms(blob: bytes) -> tuple[FileTerm, ...]:
    return tuple(FileTerm(x, u, s, e, f) for x, f, u, s, e in _TERM.iter_unpack(bytes(blob)))


def copy_index(source: MetadataIndex, target: MetadataIndex, batch: int = 10_000) -> dict[str, int]:
    """Copy every row of `source` into `target` (run with the servers stopped); returns the rows
    read per table. Idempotent: a copy interrupted half-way is finished by running it again."""
    copied: dict[str, int] = {}
    for table in TABLES:
        rows: list[tuple] = []
        copied[table] = 0
        for row in source.export_rows(table):
            rows.append(row)
            if len(rows) >= batch:
                target.import_rows(table, rows)
                copied[table] += len(rows)
                rows = []
        if rows:
            target.import_rows(table, rows)
            copied[table] += len(rows)
    return copied
