"""huggingface.js (npm @huggingface/hub) as a third real peer of `git xet serve`.

Its uploads (its own xorb/shard code, and its commit flow through our Hub emulation) land in
our server, and our client, hf-xet and huggingface.js itself read back identical bytes, whole
and in byte-range slices; huggingface.js reads what our client and hf-xet wrote. The forms it
sends that our server used to refuse (a shard footer without lookup tables, xorbs holding more
than 64 MiB uncompressed, chunks below 8 KiB from its chunker) are also checked at the format
level, with the boundaries of what stays refused.

The peer is installed by install/peers.sh (via install/test.sh); without it these tests fail.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import struct
from collections import Counter
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.core import shard as sh
from git_xet.core.compression import CompressionScheme, compress_chunk
from git_xet.core.constants import MAX_CHUNK_SIZE, MAX_XORB_BYTES, MAX_XORB_CHUNKS, MIN_CHUNK_SIZE, ZERO_HASH
from git_xet.core.errors import FormatError
from git_xet.core.http_headers import bearer
from git_xet.core.xorb import MAX_XORB_BODY_BYTES, pack_chunk_header, verify_xorb
from git_xet.pipelines.download import download
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.pipelines.upload import Uploader
from git_xet.storage.cas_store import MAX_SHARD_CHUNK_REFERENCES
from git_xet.storage.cas_store import CasStore
from tests.support import hf_xet_oracle, hfjs_peer
from tests.support.datagen import float32_like, random_bytes
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
READERS = ("ours", "hf-xet", "hfjs")


def compressible_bytes(n: int, seed: int) -> bytes:
    """Unique but LZ4-compressible data: 8 random bytes then 8 zero bytes, repeated.

    Every chunk differs (no dedup within the file) yet compresses to ~70%, so huggingface.js,
    which fills xorbs up to 64 MiB serialized, packs more than 64 MiB of it into one xorb.
    """
    rnd = random_bytes(n // 2 + 8, seed)
    out = bytearray(-(-n // 16) * 16)
    for k in range(8):
        out[k::16] = rnd[k : k + len(out) // 2 : 8][: len(out) // 16]
    return bytes(out[:n])


def slices(size: int, seed: int) -> list[tuple[int, int]]:
    """Half-open byte ranges of a file: its first byte, its last byte, and random spans."""
    if size == 0:
        return []
    rng = random.Random(seed)
    out = [(0, 1), (size - 1, size)]
    for _ in range(2):
        start = rng.randrange(size)
        out.append((start, min(size, start + rng.randint(1, 3 * MAX_CHUNK_SIZE))))
    return out


REPO = hfjs_peer.Endpoint.repo  # every token of this module names the repo the peer commits to


@pytest.fixture
def server(tmp_path: Path):
    with running_server(tmp_path / "data") as srv:
        yield srv


def _endpoint(server: RunningServer) -> hfjs_peer.Endpoint:
    return hfjs_peer.Endpoint(server.url, server.token("write", repo=REPO), server.token("read", repo=REPO))


def _write(tmp: Path, files: dict[str, bytes]) -> dict[str, Path]:
    paths = {}
    for name, data in files.items():
        paths[name] = tmp / name
        paths[name].write_bytes(data)
    return paths


def _read_back(server: RunningServer, tmp: Path, files: dict[str, bytes], xet: dict[str, str], readers=READERS) -> Counter:
    """Every reader downloads every file whole and in slices; returns files passed per reader.

    Each comparison is against the source bytes, so a reader counts a file only when all of
    its whole and sliced reads are identical to what was written.
    """
    passed: Counter = Counter()
    read_token = server.token("read", repo=REPO)
    jobs = {name: (xet[name], len(data), slices(len(data), i)) for i, (name, data) in enumerate(files.items())}

    def check(reader: str, name: str, whole: bytes, parts: list[bytes]) -> None:
        data = files[name]
        assert whole == data, f"{reader} read back {name} wrong"
        for (start, end), part in zip(jobs[name][2], parts, strict=True):
            assert part == data[start:end], f"{reader} read {name}[{start}:{end}] wrong"
        passed[reader] += 1

    if "ours" in readers:
        backend = HttpCasBackend(server.url, StaticToken(read_token), policy=FAST_RETRY)
        for name, (file_hex, size, ranges) in jobs.items():
            out = io.BytesIO()
            download(backend, file_hex, out, size=size)
            parts = []
            for start, end in ranges:
                part = io.BytesIO()
                download(backend, file_hex, part, byte_range=(start, end - 1), size=size)
                parts.append(part.getvalue())
            check("ours", name, out.getvalue(), parts)

    if "hf-xet" in readers:
        dest = tmp / "hf-xet-read"
        dest.mkdir()
        hf_xet_oracle.remote_download([(dest / n, h, s) for n, (h, s, _) in jobs.items()], server.url, read_token, tmp)
        ranges = [(dest / f"{n}.range{i}", h, s, a, b) for n, (h, s, rs) in jobs.items() for i, (a, b) in enumerate(rs)]
        hf_xet_oracle.remote_ranges(ranges, server.url, read_token, tmp)
        for name, (_, _, rs) in jobs.items():
            check("hf-xet", name, (dest / name).read_bytes(), [(dest / f"{name}.range{i}").read_bytes() for i in range(len(rs))])

    if "hfjs" in readers:
        dest = tmp / "hfjs-read"
        dest.mkdir()
        hfjs_peer.download([(dest / n, h, s, rs) for n, (h, s, rs) in jobs.items()], _endpoint(server))
        for name, (_, _, rs) in jobs.items():
            check("hfjs", name, (dest / name).read_bytes(), [(dest / f"{name}.range{i}").read_bytes() for i in range(len(rs))])
    return passed


def _stored_shards(server: RunningServer) -> list[bytes]:
    """Every shard the server registered, as kept (an object, or its index row)."""
    store = CasStore(server.data_dir)
    try:
        return [store.shard_bytes(shard_id) for shard_id in sorted(store.index.shard_ids())]
    finally:
        store.close()


def _footer_lookup_fields(blob: bytes) -> tuple[int, ...]:
    """The six lookup-table fields (offsets and counts) of a shard's footer."""
    return struct.unpack_from("<6Q", blob, len(blob) - sh.FOOTER_SIZE + 24)


# ---------------------------------------------------------------- the installed peer


def test_installed_peer_is_the_pinned_version() -> None:
    pinned = json.loads((hfjs_peer.RUNNER.parent / "package.json").read_text())["dependencies"]["@huggingface/hub"]
    assert hfjs_peer.installed_version() == pinned, "run `bash install/test.sh` to install the pinned huggingface.js"


# ---------------------------------------------------------------- huggingface.js writes, everyone reads


def test_hfjs_uploads_are_accepted_and_read_back_by_every_client(server: RunningServer, tmp_path: Path) -> None:
    files = {
        "empty.bin": b"",
        "tiny.bin": random_bytes(5, 11),
        "random.bin": random_bytes(4 << 20, 12),
        "compressible.bin": compressible_bytes(72 << 20, 13),
    }
    paths = _write(tmp_path, files)
    result = hfjs_peer.run({"direct": [str(p) for p in paths.values()], "chunk": [str(paths["random.bin"])]}, _endpoint(server))

    # Every file was uploaded, with the sha256 we compute ourselves.
    by_path = {Path(f["path"]).name: f for f in result.direct}
    assert set(by_path) == set(files)
    for name, data in files.items():
        assert by_path[name]["sha256"] == hashlib.sha256(data).hexdigest()
    xet = {name: f["xet_hash"] for name, f in by_path.items()}
    assert sum(1 for r in result.requests if r.startswith("POST /v1/shards ") and r.endswith(" 200")) >= 1
    assert not [r for r in result.requests if not r.split()[-1].startswith("2") and "/v1/chunks/" not in r]

    # The classes this test is meant to cover did occur: its chunker cut chunks below 8 KiB
    # (so the file hash differs from ours, same bytes), and one xorb holds > 64 MiB of data.
    lengths = result.chunks[str(paths["random.bin"])]
    assert sum(lengths) == len(files["random.bin"])
    assert min(lengths[:-1]) < MIN_CHUNK_SIZE, "huggingface.js no longer cuts <8 KiB chunks: find other data for that class"
    assert xet["random.bin"] != hashes.hash_to_hex(hash_bytes(files["random.bin"]).file_hash)
    assert xet["tiny.bin"] == hashes.hash_to_hex(hash_bytes(files["tiny.bin"]).file_hash)
    assert xet["empty.bin"] == hashes.hash_to_hex(ZERO_HASH)
    recon = httpx.get(
        f"{server.url}/v1/reconstructions/{xet['compressible.bin']}",
        headers=bearer(server.token('read', repo=REPO)),
        timeout=30,
    ).json()
    assert sum(t["unpacked_length"] for t in recon["terms"]) == len(files["compressible.bin"])
    per_xorb: Counter = Counter()
    for term in recon["terms"]:
        per_xorb[term["hash"]] += term["unpacked_length"]
    assert max(per_xorb.values()) > MAX_XORB_BYTES

    # It sent its shards with a footer that has no lookup tables, and we kept them as sent.
    shards = _stored_shards(server)
    assert shards and all(struct.unpack_from("<Q", s, 40)[0] == sh.FOOTER_SIZE for s in shards)
    assert all(_footer_lookup_fields(s) == (0,) * 6 for s in shards)

    passed = _read_back(server, tmp_path, files, xet)
    assert passed == {reader: len(files) for reader in READERS}


def test_hfjs_commit_flow_through_our_hub_emulation(tmp_path: Path) -> None:
    # CAS tokens shorter-lived than its 60 s safety margin: it refreshes through our token route.
    with running_server(tmp_path / "data", "--cas-token-ttl", "30") as server:
        _commit_flow(server, tmp_path)


def _commit_flow(server: RunningServer, tmp_path: Path) -> None:
    files = {"weights.bin": float32_like(1 << 20, 21), "notes.txt": random_bytes(3000, 22), "blob.bin": random_bytes(2 << 20, 23)}
    paths = _write(tmp_path, files)
    result = hfjs_peer.commit_upload(list(paths.values()), _endpoint(server))
    assert any(r.startswith("GET /api/models/peer/hfjs/xet-write-token/main 200") for r in result.requests)

    # The commit names every file by its sha256 and size; XET data went to our server.
    assert result.commit is not None
    committed = {f["path"]: (f["oid"], f["size"]) for f in result.commit["lfs_files"]}
    assert committed == {name: (hashlib.sha256(data).hexdigest(), len(data)) for name, data in files.items()}
    assert any(r.startswith("POST /peer/hfjs.git/info/lfs/objects/batch 200") for r in result.requests)
    assert any(r.startswith("POST /v1/xorbs/") and r.endswith(" 200") for r in result.requests)
    assert any(r.startswith("POST /v1/shards ") and r.endswith(" 200") for r in result.requests)

    xet = _xet_hashes(server, committed)
    passed = _read_back(server, tmp_path, files, xet)
    assert passed == {reader: len(files) for reader in READERS}


def _xet_hashes(server: RunningServer, committed: dict[str, tuple[str, int]]) -> dict[str, str]:
    """What git-lfs does after a commit: ask our Hub emulation for the files by sha256."""
    batch = httpx.post(
        f"{server.url}/peer/hfjs.git/info/lfs/objects/batch",
        json={"operation": "download", "transfers": ["xet"], "objects": [{"oid": o, "size": s} for o, s in committed.values()]},
        headers=bearer(server.token('read', repo=REPO)),
        timeout=30,
    ).json()
    by_oid = {o["oid"]: o["actions"]["download"]["header"]["X-Xet-Hash"] for o in batch["objects"]}
    return {name: by_oid[oid] for name, (oid, _) in committed.items()}


def test_hfjs_dedup_and_edits_reuse_what_is_stored(server: RunningServer, tmp_path: Path) -> None:
    """Its global dedup (first chunk only) and its range edits (commit "edit" of a stored file)
    yield shards whose files use xorbs of earlier shards, with terms cut inside them."""
    base = random_bytes(3 << 20, 31)
    insert = random_bytes(1000, 33)
    files = {"first.bin": base, "grown.bin": base + random_bytes(1 << 20, 32), "edited.bin": base[:1_000_000] + insert + base[1_000_500:]}
    paths = _write(tmp_path, files | {"insert": insert})
    first = hfjs_peer.direct_upload([paths["first.bin"]], _endpoint(server))
    grown = hfjs_peer.direct_upload([paths["grown.bin"]], _endpoint(server))
    assert any(r.startswith("GET /v1/chunks/") and r.endswith(" 200") for r in grown.requests)
    xet = {"first.bin": first.direct[0]["xet_hash"], "grown.bin": grown.direct[0]["xet_hash"]}
    splice = [1_000_000, 1_000_500, str(paths["insert"])]
    edit = hfjs_peer.run({"edit": [{"name": "edited.bin", "hash": xet["first.bin"], "size": len(base), "splices": [splice]}]}, _endpoint(server))
    assert edit.commit["lfs_files"] == [{"path": "edited.bin", "algo": "sha256", "size": len(files["edited.bin"]), "oid": hashlib.sha256(files["edited.bin"]).hexdigest()}]
    xet |= _xet_hashes(server, {"edited.bin": (edit.commit["lfs_files"][0]["oid"], len(files["edited.bin"]))})

    # Only the first upload's data, the grown file's new tail and the edited window were stored.
    sent = sum(int(line["bytes_in"]) for line in server.requests() if line["path"].startswith("/v1/xorbs/"))
    assert sent < len(base) + 2 * (1 << 20)
    passed = _read_back(server, tmp_path, files, xet)
    assert passed == {reader: len(files) for reader in READERS}


# ---------------------------------------------------------------- ours and hf-xet write, huggingface.js reads


def test_hfjs_reads_what_ours_and_hf_xet_wrote(server: RunningServer, tmp_path: Path) -> None:
    ours = {"ours-empty.bin": b"", "ours-tiny.bin": b"x", "ours-random.bin": random_bytes(3 << 20, 41), "ours-floats.bin": float32_like(1 << 20, 42)}
    theirs = {"hfxet-tiny.bin": random_bytes(100, 43), "hfxet-random.bin": random_bytes(3 << 20, 44), "hfxet-floats.bin": float32_like(1 << 20, 45)}
    xet: dict[str, str] = {}
    backend = HttpCasBackend(server.url, StaticToken(server.token("write", repo=REPO)), policy=FAST_RETRY)
    with Uploader(backend, None) as up:
        for name, data in ours.items():
            xet[name] = up.add_bytes(data).file_hex
        up.finalize()
    paths = _write(tmp_path, theirs)
    infos = hf_xet_oracle.remote_upload(list(paths.values()), server.url, server.token("write", repo=REPO), tmp_path)
    for name, info in zip(theirs, infos, strict=True):
        assert info["size"] == len(theirs[name])
        xet[name] = info["hash"]

    files = ours | theirs
    passed = _read_back(server, tmp_path, files, xet, readers=("hfjs",))
    assert passed == {"hfjs": len(files)}


# ---------------------------------------------------------------- the forms it sends, at the format level


def _rand_hash(draw) -> bytes:
    return draw(st.binary(min_size=32, max_size=32).filter(lambda h: h != b"\xff" * 32))


@st.composite
def shards(draw) -> sh.Shard:
    """Shards of random files (0-term ones included, as it sends for an empty file) and xorbs."""
    files = []
    for _ in range(draw(st.integers(0, 4))):
        n = draw(st.integers(0, 4))
        starts = [draw(st.integers(0, 100)) for _ in range(n)]
        terms = tuple(sh.FileTerm(_rand_hash(draw), draw(st.integers(1, 2**32 - 1)), s, s + draw(st.integers(1, 50))) for s in starts)
        sha = draw(st.none() | st.binary(min_size=32, max_size=32))
        files.append(sh.FileInfo(_rand_hash(draw), terms, tuple(_rand_hash(draw) for _ in terms), sha))
    cas = []
    for _ in range(draw(st.integers(0, 3))):
        sizes = draw(st.lists(st.integers(1, MAX_CHUNK_SIZE), min_size=1, max_size=5))
        cas.append(sh.CasInfo.from_chunks(_rand_hash(draw), [_rand_hash(draw) for _ in sizes], sizes, draw(st.integers(0, 2**32 - 1))))
    return sh.Shard(tuple(files), tuple(cas))


def hfjs_form(shard: sh.Shard) -> bytes:
    """A shard laid out as huggingface.js uploads it: file entries in the given (unsorted) order,
    then a footer whose lookup-table offsets and counts are all 0, expiry 0, file bytes 0."""
    out = bytearray(sh.SHARD_HEADER_TAG + struct.pack("<QQ", sh.SHARD_HEADER_VERSION, sh.FOOTER_SIZE))
    for info in shard.files:
        out += sh._serialize_file(info)
    out += b"\xff" * 32 + bytes(16)
    cas_off = len(out)
    for info in shard.cas:
        out += sh._serialize_cas(info)
    out += b"\xff" * 32 + bytes(16)
    footer_off = len(out)
    out += struct.pack("<QQQ", sh.SHARD_FOOTER_VERSION, sh.HEADER_SIZE, cas_off) + bytes(48) + bytes(32)
    out += struct.pack("<QQ", 1_700_000_000, 0) + bytes(48)
    out += struct.pack("<QQQQ", sum(c.num_bytes_on_disk for c in shard.cas), 0, sum(c.num_bytes_in_cas for c in shard.cas), footer_off)
    return bytes(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shard=shards())
def test_its_shard_form_parses_to_the_same_content(shard: sh.Shard) -> None:
    parsed = sh.parse_shard(hfjs_form(shard))
    assert parsed.files == shard.files and parsed.cas == shard.cas
    assert parsed.footer == sh.ShardFooter(ZERO_HASH, 1_700_000_000, 0)


FOOTER_FIELDS = ("version", "file_off", "cas_off", "fl_off", "fl_n", "cl_off", "cl_n", "ch_off", "ch_n")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shard=shards(), field=st.sampled_from((*FOOTER_FIELDS, "footer_off")), value=st.integers(0, 2**64 - 1), data=st.data())
def test_an_inconsistent_footer_of_that_form_is_still_refused(shard: sh.Shard, field: str, value: int, data) -> None:
    blob = bytearray(hfjs_form(shard))
    base = len(blob) - sh.FOOTER_SIZE
    offset = base + 8 * FOOTER_FIELDS.index(field) if field != "footer_off" else len(blob) - 8
    (old,) = struct.unpack_from("<Q", blob, offset)
    if value == old:
        value = old + data.draw(st.integers(1, 1000))
    struct.pack_into("<Q", blob, offset, value % 2**64)
    with pytest.raises(FormatError):
        sh.parse_shard(bytes(blob))


@settings(max_examples=100, deadline=None)
@given(count=st.integers(2, 2**32 - 1), which=st.sampled_from(["file terms", "cas chunks"]))
def test_its_shard_form_with_lying_counts_is_refused_without_allocating(count: int, which: str) -> None:
    """Counts read off the wire are checked against the bytes present before anything is read."""
    shard = sh.Shard(
        (sh.FileInfo(bytes(range(32)), (sh.FileTerm(bytes(32), 10, 0, 1),), (bytes(32),)),),
        (sh.CasInfo.from_chunks(bytes(range(1, 33)), [bytes(32)], [10]),),
    )
    blob = bytearray(hfjs_form(shard))
    position = sh.HEADER_SIZE + 36 if which == "file terms" else blob.index(bytes(range(1, 33))) + 36
    struct.pack_into("<I", blob, position, count)
    with pytest.raises(FormatError):
        sh.parse_shard(bytes(blob))


def _xorb_body(chunks: list[bytes], scheme: CompressionScheme) -> bytes:
    out = bytearray()
    for chunk in chunks:
        used, payload = compress_chunk(chunk, scheme)
        out += pack_chunk_header(len(payload), used, len(chunk)) + payload
    return bytes(out)


def test_xorb_limit_is_on_the_serialized_size() -> None:
    # > 64 MiB uncompressed in well under 64 MiB serialized, as huggingface.js packs: accepted.
    unique = [i.to_bytes(4, "little") + bytes(MAX_CHUNK_SIZE - 4) for i in range(600)]
    body = _xorb_body(unique, CompressionScheme.LZ4)
    assert len(body) < MAX_XORB_BYTES < sum(map(len, unique))
    expected = hashes.xorb_hash([hashes.chunk_hash(c) for c in unique], [len(c) for c in unique])
    assert sum(verify_xorb(body, expected).chunk_sizes) == 600 * MAX_CHUNK_SIZE

    # 64 MiB of incompressible chunks plus their headers, as hf-xet and our builder write: accepted.
    raw = [random_bytes(MAX_CHUNK_SIZE, 50 + i) for i in range(MAX_XORB_BYTES // MAX_CHUNK_SIZE)]
    body = _xorb_body(raw, CompressionScheme.NONE)
    assert MAX_XORB_BYTES < len(body) <= MAX_XORB_BODY_BYTES
    assert verify_xorb(body).chunk_sizes == tuple(map(len, raw))

    # One chunk more is past the serialized limit: refused before any chunk is decoded.
    body += _xorb_body([random_bytes(MAX_CHUNK_SIZE, 49)], CompressionScheme.NONE)
    with pytest.raises(FormatError, match="serialized"):
        verify_xorb(body)

    # More than 8192 chunks, however small: refused.
    tiny = [i.to_bytes(2, "little") for i in range(MAX_XORB_CHUNKS + 1)]
    with pytest.raises(FormatError, match="chunks"):
        verify_xorb(_xorb_body(tiny, CompressionScheme.NONE))


def test_a_shard_naming_too_many_chunks_is_refused_before_the_work(server: RunningServer) -> None:
    """One 48-byte term names up to 8192 chunks: repeated terms must not buy unbounded work."""
    chunks = [i.to_bytes(2, "little") for i in range(MAX_XORB_CHUNKS)]
    chunk_hashes = [hashes.chunk_hash(c) for c in chunks]
    xorb = hashes.xorb_hash(chunk_hashes, [2] * len(chunks))
    backend = HttpCasBackend(server.url, StaticToken(server.token("write", repo=REPO)), policy=FAST_RETRY)
    backend.upload_xorb(hashes.hash_to_hex(xorb), _xorb_body(chunks, CompressionScheme.NONE))
    whole = sh.FileTerm(xorb, 2 * len(chunks), 0, len(chunks))
    verification = hashes.verification_hash(chunk_hashes)

    def shard_of(repeats: int) -> bytes:
        file_hash = hashes.file_hash(chunk_hashes * repeats, [2] * len(chunks) * repeats)
        info = sh.FileInfo(file_hash, (whole,) * repeats, (verification,) * repeats)
        return sh.serialize_shard(sh.Shard((info,)), with_footer=False)

    headers = bearer(server.token('write', repo=REPO))
    # A file of the same xorb four times over is fine...
    ok = httpx.post(f"{server.url}/v1/shards", content=shard_of(4), headers=headers, timeout=60)
    assert ok.status_code == 200, ok.text
    # ...but a shard referencing more chunks than the bound is refused before any hashing.
    repeats = MAX_SHARD_CHUNK_REFERENCES // len(chunks) + 1
    info = sh.FileInfo(bytes(32), (whole,) * repeats, (verification,) * repeats)  # its hash is never reached
    refused = httpx.post(f"{server.url}/v1/shards", content=sh.serialize_shard(sh.Shard((info,)), with_footer=False), headers=headers, timeout=60)
    assert refused.status_code == 413 and "split the upload" in refused.json()["error"]
    assert refused.elapsed.total_seconds() < 10  # checking it would take minutes
