"""Upload and download pipelines through the real server (HTTP, 127.0.0.1) and the serverless
local store; interop with hf-xet in both directions; cache reuse; faults; corruption."""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path

import pytest

from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.shard_cache import ShardCache
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.core.constants import MAX_XORB_BYTES
from git_xet.core.http_headers import bearer
from git_xet.pipelines.download import IntegrityError, download, download_to_path
from git_xet.pipelines.upload import Uploader
from tests.support import hf_xet_oracle
from tests.support.datagen import float32_like, random_bytes
from tests.support.fault_proxy import FaultPlan, fault_proxy
from tests.support.objects import stored_objects
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.05)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    with running_server(tmp_path_factory.mktemp("pipelines") / "data") as srv:
        yield srv


def _http(server: RunningServer, url: str | None = None) -> HttpCasBackend:
    return HttpCasBackend(url or server.url, StaticToken(server.token("write")), policy=FAST_RETRY)


def _stored_xorb_bytes(data_dir: Path) -> int:
    return sum(stored_objects(data_dir).values())


CONTENTS = {
    "empty": b"",
    "tiny": b"tiny file",
    "random": random_bytes(3_000_000, 1),
    "floats": float32_like(1_000_000, 2),
    "multi-xorb": random_bytes(70_000_000, 3),
}


@pytest.mark.parametrize("kind", ["http", "local"])
def test_round_trips(kind: str, server: RunningServer, tmp_path: Path) -> None:
    backend = _http(server) if kind == "http" else LocalStoreBackend(tmp_path / "store")
    cache = ShardCache(tmp_path / "cache", backend.cache_key)
    with Uploader(backend, cache) as up:
        results = {name: up.add_bytes(data) for name, data in CONTENTS.items()}
        up.finalize()
    # Files share xorbs: all new chunks pack contiguously into ceil(total / 64 MiB) xorbs.
    total = sum(len(d) for d in CONTENTS.values())
    assert up.stats.xorbs_uploaded == -(-total // MAX_XORB_BYTES) == 2
    for name, data in CONTENTS.items():
        r = results[name]
        assert r.file_hex == hashes.hash_to_hex(hashes.file_hash(*_chunks(data)))
        assert r.sha256_hex == hashlib.sha256(data).hexdigest()
        dest = tmp_path / "out" / name
        download_to_path(backend, r.file_hex, dest, size=len(data), sha256_hex=r.sha256_hex)
        assert dest.read_bytes() == data, name
        assert oct(dest.stat().st_mode & 0o777) == "0o644"
    big = CONTENTS["multi-xorb"]
    out = io.BytesIO()
    download(backend, results["multi-xorb"].file_hex, out, byte_range=(67_000_000, 67_200_000))
    assert out.getvalue() == big[67_000_000:67_200_001]


def _chunks(data: bytes) -> tuple[list[bytes], list[int]]:
    from git_xet.pipelines.file_hashing import hash_bytes

    digest = hash_bytes(data)
    return list(digest.chunk_hashes), list(digest.chunk_sizes)


@pytest.mark.parametrize("kind", ["http", "local"])
def test_second_version_sends_only_changed_chunks(kind: str, server: RunningServer, tmp_path: Path) -> None:
    v1 = random_bytes(40_000_000, 10 + (kind == "http"))
    v2 = bytearray(v1)
    v2[10_000_000:10_000_100] = b"x" * 100
    v2[30_000_000:30_000_000] = b"an insertion that shifts everything after it"
    v2 = bytes(v2)
    backend = _http(server) if kind == "http" else LocalStoreBackend(tmp_path / "store")
    data_dir = server.data_dir if kind == "http" else tmp_path / "store"
    with Uploader(backend, ShardCache(tmp_path / "cache", backend.cache_key)) as up:
        up.add_bytes(v1)
        up.finalize()
    before = _stored_xorb_bytes(data_dir)
    # A new Uploader, as a new agent process would be: it only has the on-disk cache.
    with Uploader(backend, ShardCache(tmp_path / "cache", backend.cache_key), global_dedup=False) as up:
        r2 = up.add_bytes(v2)
        up.finalize()
    assert up.stats.xorb_bytes_sent < 0.02 * len(v2)
    assert 0 < _stored_xorb_bytes(data_dir) - before < 0.02 * len(v2)  # the edit is stored, and only about it
    assert up.stats.global_queries == 0
    out = io.BytesIO()
    download(backend, r2.file_hex, out, sha256_hex=r2.sha256_hex)
    assert out.getvalue() == v2


def test_interop_with_hf_xet_both_ways(server: RunningServer, tmp_path: Path) -> None:
    token = server.token("write")
    theirs = random_bytes(5_000_000, 20)
    (tmp_path / "theirs.bin").write_bytes(theirs)
    (info,) = hf_xet_oracle.remote_upload([tmp_path / "theirs.bin"], server.url, token, tmp_path / "hf1")
    backend = _http(server)
    # We download what hf-xet uploaded.
    out = io.BytesIO()
    download(backend, info["hash"], out, sha256_hex=hashlib.sha256(theirs).hexdigest())
    assert out.getvalue() == theirs
    # We dedup against it through the global dedup API (fresh cache), then hf-xet reads ours.
    ours = theirs[:2_000_000] + b"local edit" + theirs[2_000_000:]
    with Uploader(backend, ShardCache(tmp_path / "cache", backend.cache_key)) as up:
        r = up.add_bytes(ours)
        up.finalize()
    assert up.stats.global_queries >= 1
    assert r.new_bytes < 0.1 * len(ours)
    hf_xet_oracle.remote_download([(tmp_path / "ours.out", r.file_hex, len(ours))], server.url, token, tmp_path / "hf2")
    assert (tmp_path / "ours.out").read_bytes() == ours


def test_transient_faults_are_retried(server: RunningServer, tmp_path: Path) -> None:
    data = random_bytes(8_000_000, 30)
    plan = FaultPlan(
        error_503={"/v1/xorbs/": 2, "/v2/shards": 1, "/v2/reconstructions/": 1},
        error_429={"/v1/xorb-data/": 1},
        truncate={"/v1/xorb-data/": 2},
    )
    with fault_proxy(server.url, plan) as proxy:
        backend = _http(server, proxy)
        with Uploader(backend, ShardCache(tmp_path / "cache", backend.cache_key)) as up:
            r = up.add_bytes(data)
            up.finalize()
        out = io.BytesIO()
        download(backend, r.file_hex, out, sha256_hex=r.sha256_hex)
    assert out.getvalue() == data
    assert plan.faults_injected == 7


def test_dead_server_gives_a_clear_error_and_no_partial_file(tmp_path: Path) -> None:
    backend = HttpCasBackend("http://127.0.0.1:9", StaticToken("x"), policy=RetryPolicy(max_attempts=2, base_delay=0.01))
    with pytest.raises(TransferError, match="failed after 2 attempts"):
        download_to_path(backend, "ab" * 32, tmp_path / "out.bin")
    assert list(tmp_path.iterdir()) == []


def test_expired_xorb_urls_are_refreshed(tmp_path: Path) -> None:
    data = random_bytes(3_000_000, 40)
    with running_server(tmp_path / "data", "--url-ttl", "1") as srv:
        backend = _http(srv)
        with Uploader(backend) as up:
            r = up.add_bytes(data)
            up.finalize()

        class SlowFirstFetch(HttpCasBackend):
            """Fault injection: hold the first fetch until its signed URL has expired."""

            delayed = False

            def fetch(self, fetch):
                if not self.delayed:
                    self.delayed = True
                    time.sleep(2.2)
                return super().fetch(fetch)

        slow = SlowFirstFetch(srv.url, StaticToken(srv.token("read")), policy=FAST_RETRY)
        out = io.BytesIO()
        download(slow, r.file_hex, out, sha256_hex=r.sha256_hex)
        assert out.getvalue() == data
        assert slow.delayed


def test_corrupt_server_data_is_rejected(tmp_path: Path) -> None:
    store = tmp_path / "store"
    backend = LocalStoreBackend(store)
    data = random_bytes(2_000_000, 50)
    with Uploader(backend) as up:
        r = up.add_bytes(data)
        up.finalize()
    (xorb_file,) = [p for p in (store / "xorbs").rglob("*") if p.is_file()]
    raw = bytearray(xorb_file.read_bytes())
    raw[1_000_000] ^= 0xFF  # inside a stored (uncompressed) chunk of random data
    xorb_file.write_bytes(bytes(raw))
    with pytest.raises(IntegrityError, match="does not hash to"):
        download_to_path(backend, r.file_hex, tmp_path / "out.bin")
    assert not (tmp_path / "out.bin").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_resume_after_interrupted_upload_does_not_resend_xorbs(server: RunningServer, tmp_path: Path) -> None:
    data = random_bytes(30_000_000, 60)
    backend = _http(server)
    cache_root = tmp_path / "cache"

    class DiesBeforeShard(HttpCasBackend):
        """Fault injection: the process 'dies' after its xorbs, before the shard."""

        def upload_shard(self, body: bytes, stream_id: str | None = None) -> bool:
            raise KeyboardInterrupt

    dying = DiesBeforeShard(server.url, StaticToken(server.token("write")), policy=FAST_RETRY)
    with pytest.raises(KeyboardInterrupt), Uploader(dying, ShardCache(cache_root, backend.cache_key)) as up:
        up.add_bytes(data)
        up.finalize()
    with Uploader(backend, ShardCache(cache_root, backend.cache_key), global_dedup=False) as up:
        r = up.add_bytes(data)
        up.finalize()
    assert up.stats.xorb_bytes_sent == 0 and r.new_bytes == 0
    out = io.BytesIO()
    download(backend, r.file_hex, out, sha256_hex=r.sha256_hex)
    assert out.getvalue() == data


def test_refreshing_token_source_against_hub_routes(server: RunningServer, tmp_path: Path) -> None:
    from git_xet.client.http_backend import make_http_client
    from git_xet.client.tokens import RefreshingToken

    http = make_http_client()
    tokens = RefreshingToken(f"{server.url}/api/models/acme/m/xet-write-token/main", bearer(server.token('write', repo='acme/m')), http)
    backend = HttpCasBackend(server.url, tokens, policy=FAST_RETRY, http=http)
    with Uploader(backend) as up:
        r = up.add_bytes(b"via a refreshed token" * 1000)
        up.finalize()
    assert tokens.cas_url == server.url
    out = io.BytesIO()
    download(backend, r.file_hex, out)
    assert out.getvalue() == b"via a refreshed token" * 1000


def test_small_files_do_not_ask_global_dedup(server: RunningServer) -> None:
    """One round trip per small file would cost more than its bytes could save."""
    from git_xet.pipelines.upload import GLOBAL_DEDUP_MIN_FILE

    backend = _http(server)
    with Uploader(backend) as up:
        up.add_bytes(random_bytes(GLOBAL_DEDUP_MIN_FILE - 1, 50))
        up.finalize()
    assert up.stats.global_queries == 0
    with Uploader(backend) as up:
        up.add_bytes(random_bytes(GLOBAL_DEDUP_MIN_FILE, 51))
        up.finalize()
    assert up.stats.global_queries >= 1


@pytest.mark.parametrize("size", [3_000_000, 500_000])  # its own upload; sent with the shard
@pytest.mark.parametrize("kind", ["http", "local"])
def test_bytes_changed_before_their_xorb_is_sent_are_refused_not_stored(kind: str, size: int, server: RunningServer, tmp_path: Path) -> None:
    """A xorb's raw chunks are sent from where the caller has them (a file's map, here a
    buffer): bytes rewritten between hashing and sending no longer match the xorb's hash, the
    store refuses the xorb instead of keeping it under that hash, and the error says why."""
    backend = _http(server) if kind == "http" else LocalStoreBackend(tmp_path / "store")
    data_dir = server.data_dir if kind == "http" else tmp_path / "store"
    data = bytearray(random_bytes(size, 41))
    before = _stored_xorb_bytes(data_dir) if data_dir.exists() else 0
    with Uploader(backend, global_dedup=False) as up:
        up.add_bytes(memoryview(data))
        data[size // 2 : size // 2 + 100] = bytes(100)  # after hashing, before finalize sends the xorb
        with pytest.raises(TransferError, match="changed while it was being uploaded") as caught:
            up.finalize()
        assert not caught.value.retryable
    assert (_stored_xorb_bytes(data_dir) if data_dir.exists() else 0) == before
    with Uploader(backend, global_dedup=False) as up:
        result = up.add_bytes(bytes(data))
        up.finalize()
    out = io.BytesIO()
    download(backend, result.file_hex, out, sha256_hex=hashlib.sha256(data).hexdigest())
    assert out.getvalue() == bytes(data)
