"""Racing writers of one xorb with different valid encodings (raw, LZ4, BG4, hf-xet's own LZ4
frames) never leave the store describing one body while holding another: threads against the
real server, processes against one local store; afterwards every xorb reads back through a
file that uses all of its chunks."""

from __future__ import annotations

import hashlib
import io
import multiprocessing
import random
import threading
from pathlib import Path

import pytest

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.core.compression import CompressionScheme
from git_xet.core.xorb import parse_xorb, verify_xorb
from git_xet.pipelines.download import download
from git_xet.pipelines.file_hashing import FileDigest, hash_bytes
from tests.support import hf_xet_oracle
from tests.support.objects import encoded_xorb, whole_xorb_file_shard
from tests.support.server_process import running_server

RACES = 12  # distinct xorbs per run, each raced by two encodings


def _data(seed: int) -> bytes:
    """About 1.5 MiB that LZ4 and BG4 both shrink (so every encoding is a valid xorb)."""
    rng = random.Random(seed)
    lines = [b"%d,%f,%s\n" % (rng.randrange(10**6), rng.random(), rng.randbytes(6).hex().encode()) for _ in range(500)]
    return b"".join(rng.choices(lines, k=40_000))


def _without_footer(stored: bytes) -> bytes:
    return stored[: parse_xorb(stored).body_length]


@pytest.fixture(scope="module")
def races(tmp_path_factory: pytest.TempPathFactory):
    """Per race: the data, its digest, its xorb hash, and the two encodings that race."""
    root = tmp_path_factory.mktemp("races")
    datas = [_data(seed) for seed in range(RACES)]
    paths = []
    for i, data in enumerate(datas):
        paths.append(root / f"f{i}")
        paths[-1].write_bytes(data)
    theirs = hf_xet_oracle.upload_each(paths, root / "hf")
    out = []
    schemes = [CompressionScheme.NONE, CompressionScheme.LZ4, CompressionScheme.BG4_LZ4]
    for i, (data, store) in enumerate(zip(datas, theirs)):
        digest = hash_bytes(data, with_sha256=True)
        (hf_hash, hf_xorb), = store.xorbs.items()
        encodings = {s.name: encoded_xorb(data, digest, s) for s in schemes} | {"hf-xet": _without_footer(hf_xorb)}
        xorb_hash = verify_xorb(encodings["NONE"]).xorb_hash
        assert hashes.hash_to_hex(xorb_hash) == hf_hash  # one xorb, whoever encodes it
        assert len(set(encodings.values())) == 4  # four different bodies
        names = sorted(encodings)
        a, b = names[i % 4], names[(i + 1 + i // 4) % 4]
        out.append((data, digest, xorb_hash, encodings[a], encodings[b]))
    return out


def _read_back(backend, data: bytes, digest: FileDigest, xorb_hash: bytes) -> None:
    backend.upload_shard(whole_xorb_file_shard(digest, xorb_hash))
    out = io.BytesIO()
    download(backend, hashes.hash_to_hex(digest.file_hash), out, sha256_hex=hashlib.sha256(data).hexdigest())
    assert out.getvalue() == data


def test_threads_racing_on_the_server(races, tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as server:
        token = server.token("write")
        winners = []
        for _data, _digest, xorb_hash, first, second in races:
            barrier = threading.Barrier(2)
            results: list[bool] = []

            # This round's barrier, results and hash are arguments, not closure cells: a thread
            # still running after its join timed out must not see the next round's.
            def upload(xorb_hex: str, body: bytes, barrier: threading.Barrier, results: list[bool]) -> None:
                backend = HttpCasBackend(server.url, StaticToken(token))
                barrier.wait()
                results.append(backend.upload_xorb(xorb_hex, body))

            xorb_hex = hashes.hash_to_hex(xorb_hash)
            threads = [threading.Thread(target=upload, args=(xorb_hex, body, barrier, results)) for body in (first, second)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
                assert not t.is_alive(), "an upload did not finish within 60 s"
            winners.append(results.count(True))
        assert winners == [1] * len(races)  # exactly one writer created each xorb
        backend = HttpCasBackend(server.url, StaticToken(token))
        for data, digest, xorb_hash, _first, _second in races:
            _read_back(backend, data, digest, xorb_hash)


def _racer(root: str, xorb_hex: str, body: bytes, shard: bytes | None, barrier, results) -> None:
    """Upload the xorb, or with `shard` the bundle of both (as the agent sends a small file)."""
    backend = LocalStoreBackend(Path(root))
    barrier.wait()
    results.put(backend.upload_xorb(xorb_hex, body) if shard is None else backend.upload_xorbs_with_shard([(xorb_hex, body)], shard))


@pytest.mark.parametrize("bundled", [False, True], ids=["xorbs", "bundles"])
def test_processes_racing_on_a_local_store(races, tmp_path: Path, bundled: bool) -> None:
    """Exactly one racer creates the xorb, or with bundles registers the shard (the other's is
    a repeat); either way the store describes the bytes it holds."""
    ctx = multiprocessing.get_context("fork")
    root = tmp_path / "store"
    LocalStoreBackend(root)  # create it before the racers open it
    for _data, digest, xorb_hash, first, second in races:
        barrier, results = ctx.Barrier(2), ctx.Queue()
        shard = whole_xorb_file_shard(digest, xorb_hash) if bundled else None
        procs = [ctx.Process(target=_racer, args=(str(root), hashes.hash_to_hex(xorb_hash), body, shard, barrier, results)) for body in (first, second)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        assert sorted(results.get(timeout=5) for _ in procs) == [False, True]
    backend = LocalStoreBackend(root)
    for data, digest, xorb_hash, _first, _second in races:
        _read_back(backend, data, digest, xorb_hash)
