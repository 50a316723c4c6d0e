"""Build XET objects for tests with the protocol core."""

from __future__ import annotations

from pathlib import Path

from git_xet.core import hashes, xorb
from git_xet.core.compression import CompressionScheme, compress
from git_xet.core.shard import CasInfo, FileInfo, FileTerm, Shard, serialize_shard
from git_xet.pipelines.file_hashing import FileDigest, hash_bytes
from git_xet.storage.objects import DirectoryObjectStore


def stored_objects(root: Path, prefix: str = "xorbs/") -> dict[str, int]:
    """Key -> size of every object under `prefix` in the directory store at `root`: files and
    the small objects packed as rows of its objects.sqlite alike."""
    objects = DirectoryObjectStore(root)
    try:
        return dict(objects.sizes(prefix))
    finally:
        objects.close()


def single_xorb(data: bytes) -> tuple[xorb.VerifiedXorb, FileDigest]:
    """All of `data`'s chunks in one xorb (data must fit: at most 64 MiB), and its digest."""
    digest = hash_bytes(data)
    builder = xorb.XorbBuilder()
    pos = 0
    for size, chunk_digest in zip(digest.chunk_sizes, digest.chunk_hashes):
        builder.add(data[pos : pos + size], chunk_digest)
        pos += size
    return builder.build(), digest


def encoded_xorb(data: bytes, digest: FileDigest, scheme: CompressionScheme) -> bytes:
    """The footerless xorb of all of data's chunks, each in `scheme` where that shrinks it (raw
    otherwise, as every client does): one xorb hash, a different body per scheme (as different
    clients upload the same chunks)."""
    out, pos = bytearray(), 0
    for size in digest.chunk_sizes:
        chunk = data[pos : pos + size]
        payload = chunk if scheme is CompressionScheme.NONE else compress(chunk, scheme)
        used = scheme if len(payload) < size else CompressionScheme.NONE
        if used is CompressionScheme.NONE:
            payload = chunk
        out += xorb.pack_chunk_header(len(payload), used, size) + payload
        pos += size
    return bytes(out)


def whole_xorb_file_shard(digest: FileDigest, xorb_hash: bytes) -> bytes:
    """An upload-form shard registering one file made of every chunk of one xorb (digest
    needs its sha256: hash_bytes(data, with_sha256=True))."""
    n = len(digest.chunk_hashes)
    term = FileTerm(xorb_hash, digest.size, 0, n)
    info = FileInfo(digest.file_hash, (term,), (hashes.verification_hash(digest.chunk_hashes),), digest.sha256)
    return serialize_shard(Shard((info,), (CasInfo.from_chunks(xorb_hash, digest.chunk_hashes, digest.chunk_sizes),)), with_footer=False)


def bundle_parts(files: list[bytes], one_xorb: bool, claims: list[bytes | None]) -> tuple[list[tuple[str, bytes]], bytes]:
    """The xorbs (hex hash, body) and the upload-form shard of `files`, as an upload bundle
    carries them: all their chunks in one xorb, or each file's in its own; file i claims
    sha256 `claims[i]`."""
    groups = [files] if one_xorb else [[f] for f in files]
    xorbs: list[tuple[str, bytes]] = []
    cas: list[CasInfo] = []
    infos: list[FileInfo] = []
    claim_of = iter(claims)
    for group in groups:
        builder = xorb.XorbBuilder()
        placed: list[tuple[FileDigest, int]] = []  # each file's digest and first chunk in the xorb
        first = 0
        for data in group:
            digest = hash_bytes(data)
            pos = 0
            for size, chunk_hash in zip(digest.chunk_sizes, digest.chunk_hashes):
                builder.add(data[pos : pos + size], chunk_hash)
                pos += size
            placed.append((digest, first))
            first += len(digest.chunk_hashes)
        built = builder.build()
        xorbs.append((hashes.hash_to_hex(built.xorb_hash), bytes(built.body)))
        cas.append(CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes))
        for digest, start in placed:
            term = FileTerm(built.xorb_hash, digest.size, start, start + len(digest.chunk_hashes))
            infos.append(FileInfo(digest.file_hash, (term,), (hashes.verification_hash(digest.chunk_hashes),), next(claim_of)))
    return xorbs, serialize_shard(Shard(tuple(infos), tuple(cas)), with_footer=False)


def assert_stored_whole(data_dir: Path, oids: set[str], by_oid: dict[str, bytes]) -> None:
    """Each of `oids` (objects an agent reported complete) is in the store at `data_dir`, with
    the bytes `by_oid` gives it."""
    from git_xet.storage.cas_store import CasStore

    store = CasStore(data_dir)
    try:
        for oid in sorted(oids):
            stored = store.file_by_sha256(oid)
            assert stored is not None, f"{oid[:12]} was reported complete but is not in the store"
            assert b"".join(store.iter_file_bytes(stored)) == by_oid[oid]
    finally:
        store.close()
