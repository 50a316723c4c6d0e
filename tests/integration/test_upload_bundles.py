"""A small file's xorb and its shard in one request (`POST /git-xet/v1/upload-bundles`), against
the real `git xet serve`: used by a client whose server lists it in its capabilities (asked once
per store), two requests for a server without them, refused whole when any part does not
verify, and still taken at the previous release's path (`POST /v1/xorbs-and-shard`)."""

from __future__ import annotations

import hashlib
import io
import json
import struct
from collections import Counter
from pathlib import Path

import httpx

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.core import extension, hashes
from git_xet.core.compression import CompressionScheme
from git_xet.core.http_headers import bearer
from git_xet.core.upload_bundle import MAX_BUNDLE_XORBS, pack_bundle
from git_xet.core.xorb import verify_xorb
from git_xet.pipelines.download import download
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.pipelines.upload import WITH_SHARD_BELOW, Uploader
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.fault_proxy import FaultPlan, fault_proxy
from tests.support.objects import encoded_xorb, whole_xorb_file_shard
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)


def _calls(server: RunningServer) -> Counter:
    """(method, path without its hash, status) of each request the server logged."""
    out: Counter = Counter()
    for line in server.log().splitlines():
        if '"path": ' in line:
            record = json.loads(line.split(" ", 3)[-1])
            path = "/".join(part for part in record["path"].split("/") if len(part) != 64)
            out[(record["method"], path, record["status"])] += 1
    return out


def _push_each(backend: HttpCasBackend, files: list[bytes]) -> list[str]:
    """Each file uploaded and finalized on its own, as the agent does per LFS object."""
    hashes_out = []
    with Uploader(backend, global_dedup=False) as up:
        for data in files:
            hashes_out.append(up.add_bytes(data).file_hex)
            up.finalize()
    return hashes_out


def _assert_readable(backend: HttpCasBackend, files: list[bytes], file_hexes: list[str]) -> None:
    for data, file_hex in zip(files, file_hexes):
        out = io.BytesIO()
        download(backend, file_hex, out, sha256_hex=hashlib.sha256(data).hexdigest())
        assert out.getvalue() == data


def test_small_files_go_with_their_shard_in_one_request(tmp_path: Path) -> None:
    small = [random_bytes(size, 400 + size) for size in (5_000, 70_000, 300_000)]
    large = random_bytes(2 * WITH_SHARD_BELOW, 401)  # its xorb is too large to wait for the shard
    with running_server(tmp_path / "data") as server:
        backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY, extension=True)
        file_hexes = _push_each(backend, [*small, large])
        calls = _calls(server)
        assert calls[("POST", extension.UPLOAD_BUNDLES, 200)] == len(small)
        # The large file: its xorb posted as it filled (a directory server offers no grants),
        # then its shard alone.
        assert calls[("POST", "/v1/xorbs/default", 200)] == 1 and calls[("POST", "/v2/shards", 200)] == 1
        _assert_readable(backend, [*small, large], file_hexes)
        # Without bundles (any server not known to be ours): two requests per small file, and
        # no capabilities asked.
        plain = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY)
        _push_each(plain, [random_bytes(6_000, 402)])
        calls = _calls(server)
        assert calls[("POST", extension.UPLOAD_BUNDLES, 200)] == len(small)
        # One store session: its capabilities asked once, for all its uploads and downloads.
        assert sum(n for (method, path, _), n in calls.items() if path == extension.CAPABILITIES) == 1


def test_a_server_without_capabilities_gets_two_requests(tmp_path: Path) -> None:
    files = [random_bytes(20_000 + i, 410 + i) for i in range(3)]
    with running_server(tmp_path / "data") as server:
        plan = FaultPlan(statuses={extension.CAPABILITIES: [404, 404]})  # as an older server (or the Hub's CAS) answers
        with fault_proxy(server.url, plan) as url:
            backend = HttpCasBackend(url, StaticToken(server.token()), policy=FAST_RETRY, extension=True)
            file_hexes = _push_each(backend, files)
            _assert_readable(backend, files, file_hexes)
        assert plan.statuses[extension.CAPABILITIES] == [404] and plan.faults_injected == 1  # asked once, never again
        calls = _calls(server)
        assert calls[("POST", "/v1/xorbs/default", 200)] == len(files) and calls[("POST", "/v2/shards", 200)] == len(files)
        assert not any(extension.PREFIX in path for _, path, _ in calls)  # nothing of ours tried


def test_a_bundle_that_does_not_verify_registers_nothing(tmp_path: Path) -> None:
    data = random_bytes(40_000, 420)
    digest = hash_bytes(data, with_sha256=True)
    body = encoded_xorb(data, digest, CompressionScheme.NONE)
    xorb_hash = verify_xorb(body).xorb_hash
    shard = whole_xorb_file_shard(digest, xorb_hash)
    tampered = bytearray(body)
    tampered[-1] ^= 1
    with running_server(tmp_path / "data") as server:
        url = f"{server.url}{extension.UPLOAD_BUNDLES}"
        write, read = bearer(server.token("write")), bearer(server.token("read"))
        refused = {
            "no token": (httpx.post(url, content=pack_bundle([(xorb_hash, body)], shard)), 401),
            "read token": (httpx.post(url, headers=read, content=pack_bundle([(xorb_hash, body)], shard)), 403),
            "garbage": (httpx.post(url, headers=write, content=b"\xff" * 40), 400),
            "too many xorbs": (httpx.post(url, headers=write, content=struct.pack("<I", MAX_BUNDLE_XORBS + 1) + bytes(36 * (MAX_BUNDLE_XORBS + 1)) + shard), 400),
            "a xorb that is not its hash": (httpx.post(url, headers=write, content=pack_bundle([(xorb_hash, bytes(tampered))], shard)), 400),
            "a shard naming a xorb not sent": (httpx.post(url, headers=write, content=pack_bundle([], shard)), None),
        }
        for what, (resp, status) in refused.items():
            assert resp.status_code == status if status else 400 <= resp.status_code < 500, (what, resp.status_code, resp.text)
        store = CasStore(server.data_dir)
        try:
            assert store.stats()["files"] == 0 and store.xorb_layout(hashes.hash_to_hex(xorb_hash)) is None
        finally:
            store.close()
        # Accepted at the previous release's path too (server/deprecated.py), as its agents send.
        accepted = httpx.post(f"{server.url}/v1/xorbs-and-shard", headers=write, content=pack_bundle([(xorb_hash, body)], shard))
        assert accepted.status_code == 200 and accepted.json() == {"result": 1}, accepted.text
        backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY)
        _assert_readable(backend, [data], [hashes.hash_to_hex(digest.file_hash)])
