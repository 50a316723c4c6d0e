"""register_shard with verify_sha256 (the server's way): the claimed sha256 of each new file is
checked against the stored bytes. That pass does not hash the chunks again, so when the check
fails the store must still tell a wrong claim (Rejected) from stored bytes damaged since their
xorb was verified (Damaged), and register nothing either way. Files larger than
READ_AHEAD_ABOVE are read in a thread of their own: the same holds for them, and the thread is
gone once register_shard returns or raises."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import hashes, shard
from git_xet.core.compression import CompressionScheme
from git_xet.core.xorb import verify_xorb
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.storage.cas_store import READ_AHEAD_ABOVE, CasStore, Sha256Prefix
from git_xet.storage.errors import Damaged, Rejected
from tests.support.datagen import random_bytes
from tests.support.objects import encoded_xorb, single_xorb


def _stored(store: CasStore, data: bytes, claim: bytes | None = None) -> tuple[bytes, str]:
    """`data` as one stored xorb (raw chunks: a random file does not compress); the shard that
    registers it, claiming `claim` (by default `data`'s sha256), and the xorb's object key."""
    built, digest = single_xorb(data)
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    store.put_xorb(xorb_hex, built.body)
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), claim or hashlib.sha256(data).digest())
    return shard.serialize_shard(shard.Shard((info,)), with_footer=False), store.xorb_key(xorb_hex)


SMALL_OR_READ_AHEAD = st.one_of(st.integers(1, 300_000), st.integers(READ_AHEAD_ABOVE + 1, READ_AHEAD_ABOVE + 3_000_000))


def _no_reader_thread() -> bool:
    return not any(t.name == "git-xet-sha256-read" for t in threading.enumerate())


@settings(max_examples=12, deadline=None)
@given(size=SMALL_OR_READ_AHEAD, seed=st.integers(0, 2**32), where=st.floats(0, 1, exclude_max=True))
def test_damage_is_told_from_a_wrong_claim(tmp_path_factory: pytest.TempPathFactory, size: int, seed: int, where: float) -> None:
    store = CasStore(tmp_path_factory.mktemp("store"))
    try:
        data = random_bytes(size, seed)
        body, key = _stored(store, data)
        # A wrong claim on intact bytes: the claim is refused.
        wrong, _ = _stored(store, data, claim=hashlib.sha256(data + b"!").digest())
        with pytest.raises(Rejected, match="does not match its content"):
            store.register_shard(wrong, verify_sha256=True)
        assert _no_reader_thread()
        # A byte of the stored object's data flipped after the xorb was verified: the store is blamed.
        stored = bytearray(store.objects.read(key))
        payload_start = 8  # the first chunk's header; a random chunk is stored raw after it
        stored[payload_start + int(where * min(size, len(stored) - payload_start - 1))] ^= 0x40
        store.objects.put(key, bytes(stored))  # in place of the object, wherever the store keeps it
        with pytest.raises(Damaged, match="damaged"):
            store.register_shard(body, verify_sha256=True)
        assert _no_reader_thread()
        assert store.stats()["files"] == 0 and store.stats()["repo_oids"] == 0
    finally:
        store.close()


@pytest.mark.parametrize("size", [200_000, 3 * READ_AHEAD_ABOVE])
def test_intact_bytes_and_a_right_claim_register(tmp_path: Path, size: int) -> None:
    store = CasStore(tmp_path / "store")
    try:
        data = random_bytes(size, 7)
        body, _ = _stored(store, data)
        assert store.register_shard(body, verify_sha256=True)
        assert store.file_by_sha256(hashlib.sha256(data).hexdigest()) is not None
        assert _no_reader_thread()
    finally:
        store.close()


@pytest.mark.parametrize("damage", ["another encoding", "a chunk header"])
def test_stored_bytes_that_do_not_parse_as_the_index_says_are_damage(tmp_path: Path, damage: str) -> None:
    """Stored bytes whose records do not fall where the index's layout says (another valid
    encoding of the xorb in its place, as a store with a non-atomic conditional write can
    leave; or a damaged chunk header): Damaged, which says so, not an internal error."""
    store = CasStore(tmp_path / "store")
    try:
        data = random_bytes(150_000, 3) + b"0123456789abcdef" * 20_000  # LZ4 shrinks only the second part
        body, key = _stored(store, data)
        if damage == "another encoding":
            digest = hash_bytes(data)
            other = encoded_xorb(data, digest, CompressionScheme.LZ4)
            store.objects.put(key, other + verify_xorb(other).footer().serialize())
        else:
            stored = bytearray(store.objects.read(key))
            stored[0] ^= 0xFF  # the first chunk's format version
            store.objects.put(key, bytes(stored))
        with pytest.raises(Damaged, match=f"xorb {key.rsplit('/', 1)[1]} is damaged"):
            store.register_shard(body, verify_sha256=True)
        assert store.stats()["files"] == 0
    finally:
        store.close()


def _stored_in_xorbs(store: CasStore, parts: list[bytes], claim: bytes | None = None) -> tuple[bytes, list[bytes]]:
    """A file made of `parts`, each stored as a xorb of its own; the shard registering it
    (claiming `claim`, by default the sha256 of all parts) and the xorbs' hashes, in order."""
    terms, verification, chunk_hashes, chunk_sizes, names = [], [], [], [], []
    for part in parts:
        built, digest = single_xorb(part)
        store.put_xorb(hashes.hash_to_hex(built.xorb_hash), built.body)
        terms.append(shard.FileTerm(built.xorb_hash, len(part), 0, len(built.chunk_hashes)))
        verification.append(hashes.verification_hash(built.chunk_hashes))
        chunk_hashes += digest.chunk_hashes
        chunk_sizes += digest.chunk_sizes
        names.append(built.xorb_hash)
    info = shard.FileInfo(hashes.file_hash(chunk_hashes, chunk_sizes), tuple(terms), tuple(verification), claim or hashlib.sha256(b"".join(parts)).digest())
    return shard.serialize_shard(shard.Shard((info,)), with_footer=False), names


def _counting_reads(store: CasStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Bytes the store reads from its objects, per read, from now on."""
    reads: list[int] = []
    read_range = store.objects.read_range

    def counted(key: str, start: int, end_inclusive: int) -> bytes:
        data = read_range(key, start, end_inclusive)
        reads.append(len(data))
        return data

    monkeypatch.setattr(store.objects, "read_range", counted)
    return reads


PARTS = [random_bytes(150_000, 11), random_bytes(90_000, 12), random_bytes(40_000, 13)]


@pytest.mark.parametrize("streamed", [3, 2, 1])
def test_a_prefix_hashed_as_the_xorbs_arrived_is_continued_not_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, streamed: int) -> None:
    """A file that begins with the prefix's xorbs, whole: only the rest is read back."""
    store = CasStore(tmp_path / "store")
    try:
        body, names = _stored_in_xorbs(store, PARTS)
        prefix = Sha256Prefix(tuple(names[:streamed]), hashlib.sha256(b"".join(PARTS[:streamed])))
        reads = _counting_reads(store, monkeypatch)
        assert store.register_shard(body, verify_sha256=True, prefix=prefix)
        assert sum(reads) < sum(len(p) for p in PARTS[streamed:]) + 1000  # the rest (and record headers) only
        assert store.file_by_sha256(hashlib.sha256(b"".join(PARTS)).hexdigest()) is not None
    finally:
        store.close()


def test_a_prefix_does_not_let_a_wrong_claim_through(tmp_path: Path) -> None:
    store = CasStore(tmp_path / "store")
    try:
        body, names = _stored_in_xorbs(store, PARTS, claim=hashlib.sha256(b"not this").digest())
        prefix = Sha256Prefix(tuple(names), hashlib.sha256(b"".join(PARTS)))
        with pytest.raises(Rejected, match="does not match its content"):
            store.register_shard(body, verify_sha256=True, prefix=prefix)
        assert store.stats()["repo_oids"] == 0
    finally:
        store.close()


@pytest.mark.parametrize("xorbs", ["not leading", "out of order", "more than the file"])
def test_a_prefix_the_file_does_not_begin_with_is_ignored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xorbs: str) -> None:
    """Its digest is not used (here it is of other bytes, so using it would refuse the claim):
    the file is read back whole."""
    store = CasStore(tmp_path / "store")
    try:
        body, names = _stored_in_xorbs(store, PARTS)
        chosen = {"not leading": names[1:], "out of order": [names[1], names[0]], "more than the file": [*names, names[0]]}[xorbs]
        prefix = Sha256Prefix(tuple(chosen), hashlib.sha256(b"other bytes"))
        reads = _counting_reads(store, monkeypatch)
        assert store.register_shard(body, verify_sha256=True, prefix=prefix)
        assert sum(reads) >= sum(len(p) for p in PARTS)
    finally:
        store.close()
