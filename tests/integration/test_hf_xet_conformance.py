"""Bit-exactness against the official client (hf-xet from PyPI) on generated files.

For each file: hf_xet.hash_files gives the same file hash as we compute; hf-xet's local://
store holds xorbs whose chunk boundaries, chunk hashes and xorb hashes equal ours, whose
footers we rebuild byte for byte, and shards whose verification hashes and sha256 metadata
equal ours.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from git_xet.core import hashes, shard, xorb
from git_xet.core.constants import MAX_CHUNK_SIZE, MIN_CHUNK_SIZE
from git_xet.pipelines.file_hashing import hash_bytes, hash_file
from tests.support import hf_xet_oracle
from tests.support.objects import single_xorb
from tests.support.datagen import float32_like, planted, random_bytes, splitmix64_bytes

pytest.importorskip("hf_xet", reason="hf-xet (the conformance oracle) is a test dependency")

CASES: dict[str, bytes] = {
    "empty": b"",
    "one-byte": b"\x01",
    "hello": b"Hello World!",
    "8191": random_bytes(8191, 1),
    "8192": random_bytes(8192, 2),
    "8193": random_bytes(8193, 3),
    "131071": random_bytes(131071, 4),
    "131072": random_bytes(131072, 5),
    "131073": random_bytes(131073, 6),
    "zeros-1m": bytes(1_000_000),
    "pattern": (b"0123456789abcdef" * 4096 + random_bytes(3000, 8)) * 30,
    "splitmix-1m": splitmix64_bytes(1_000_000, 0),
    "random-3m": random_bytes(3_000_000, 9),
    "floats-2m": float32_like(2_000_000, 10),
    "multi-xorb-70m": random_bytes(70_000_000, 11),
    "planted-hits": planted(400_000, [MIN_CHUNK_SIZE - 1, MIN_CHUNK_SIZE + MIN_CHUNK_SIZE, 150_000, 150_000 + MAX_CHUNK_SIZE]),
}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("conformance")
    paths = {}
    for name, data in CASES.items():
        paths[name] = root / f"{name}.bin"
        paths[name].write_bytes(data)
    return paths


@pytest.fixture(scope="module")
def stores(files: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, hf_xet_oracle.LocalStore]:
    names = list(files)
    uploaded = hf_xet_oracle.upload_each([files[n] for n in names], tmp_path_factory.mktemp("hf-xet"))
    return dict(zip(names, uploaded))


def test_file_hashes_match_hash_files(files: dict[str, Path], tmp_path: Path) -> None:
    names = list(files)
    theirs = hf_xet_oracle.hash_files([files[n] for n in names], tmp_path)
    ours = [hashes.hash_to_hex(hash_file(files[n]).file_hash) for n in names]
    assert dict(zip(names, ours)) == dict(zip(names, theirs))
    assert theirs[names.index("empty")] == "0" * 64


@pytest.mark.parametrize("name", [n for n in CASES if n != "empty"])
def test_local_store_objects_match(name: str, stores: dict[str, hf_xet_oracle.LocalStore]) -> None:
    data = CASES[name]
    store = stores[name]
    ours = hash_bytes(data, with_sha256=True)
    assert store.file_hash == hashes.hash_to_hex(ours.file_hash)
    assert store.sha256 == hashlib.sha256(data).hexdigest()

    # Xorbs: their chunk boundaries and hashes, read off their footers, equal ours; their
    # footer is exactly the one we rebuild from the chunk records.
    their_chunks: dict[bytes, tuple[tuple[bytes, ...], tuple[int, ...]]] = {}
    for xorb_name, blob in store.xorbs.items():
        verified = xorb.verify_xorb(blob, hashes.hex_to_hash(xorb_name))
        assert verified.with_footer() == blob
        their_chunks[verified.xorb_hash] = (verified.chunk_hashes, verified.chunk_sizes)

    (stored_shard,) = [shard.parse_shard(b) for b in store.shards]
    (file_info,) = stored_shard.files
    assert file_info.file_hash == ours.file_hash
    assert file_info.flags == 0xC0000000
    assert file_info.sha256 == hashlib.sha256(data).digest()

    # Walk the file's terms through their xorbs: the chunk sequence must be ours, and each
    # term's verification hash must be what we compute for that chunk range.
    seq_hashes: list[bytes] = []
    seq_sizes: list[int] = []
    for term, verification in zip(file_info.terms, file_info.verification or ()):
        chunk_hashes, chunk_sizes = their_chunks[term.xorb_hash]
        term_hashes = chunk_hashes[term.chunk_start : term.chunk_end]
        assert verification == hashes.verification_hash(term_hashes)
        assert term.unpacked_bytes == sum(chunk_sizes[term.chunk_start : term.chunk_end])
        seq_hashes += term_hashes
        seq_sizes += chunk_sizes[term.chunk_start : term.chunk_end]
    assert tuple(seq_hashes) == ours.chunk_hashes
    assert tuple(seq_sizes) == ours.chunk_sizes

    if name == "multi-xorb-70m":
        assert len(store.xorbs) >= 2, "70 MB must span more than one 64 MiB xorb"

    # CAS blocks describe the xorbs with the chunk hashes and sizes we derive.
    for cas in stored_shard.cas:
        chunk_hashes, chunk_sizes = their_chunks[cas.xorb_hash]
        assert tuple(c.chunk_hash for c in cas.chunks) == chunk_hashes
        assert hashes.xorb_hash(chunk_hashes, chunk_sizes) == cas.xorb_hash


def test_single_file_xorb_hash_equals_ours(stores: dict[str, hf_xet_oracle.LocalStore]) -> None:
    """For a file that fits one xorb, building the xorb ourselves gives hf-xet's xorb hash."""
    data = CASES["random-3m"]
    built, _ = single_xorb(data)
    assert list(stores["random-3m"].xorbs) == [hashes.hash_to_hex(built.xorb_hash)]
    # Their stored xorb decodes to exactly our chunks (compression may differ, content not).
    theirs = stores["random-3m"].xorbs[hashes.hash_to_hex(built.xorb_hash)]
    parsed = xorb.parse_xorb(theirs)
    assert b"".join(xorb.decode_all_chunks(theirs, parsed.records)) == data


def test_stored_shards_survive_our_round_trip(stores: dict[str, hf_xet_oracle.LocalStore]) -> None:
    """Our serializer reproduces hf-xet's stored shards once parsed (lookup tables aside)."""
    for store in stores.values():
        for blob in store.shards:
            parsed = shard.parse_shard(blob)
            again = shard.parse_shard(shard.serialize_shard(parsed, with_footer=True))
            assert again == parsed
