"""`git xet serve --objects s3://...` on a real SeaweedFS: upload grants PUT straight into the
bucket (staged, verified at commit), reconstructions hand out presigned ranged GETs on the
bucket, `POST /v1/xorbs` keeps working; our client, hf-xet and huggingface.js as peers."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.core.checksums import crc64nvme, crc64nvme_reference
from git_xet.core.compression import CompressionScheme
from git_xet.core.reconstruction import MAX_FETCH_RANGE_BYTES
from git_xet.core.xorb import verify_xorb
from git_xet.pipelines.download import download
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.pipelines.upload import Uploader
from git_xet.server.grants import ABANDONED_AFTER, collect_abandoned_uploads
from git_xet.storage.s3 import MIN_COPY_PART_BYTES, S3Config, S3Location, S3ObjectStore
from git_xet.core.http_headers import bearer
from tests.support import hf_xet_oracle, hfjs_peer
from tests.support.datagen import random_bytes
from tests.support.objects import encoded_xorb, single_xorb, whole_xorb_file_shard
from tests.support.seaweed import RunningS3
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
DATA = random_bytes(3_000_000, 31)


@contextmanager
def s3_server(tmp: Path, s3: RunningS3, *extra: str) -> Iterator[tuple[RunningServer, S3ObjectStore]]:
    bucket = s3.new_bucket()
    with running_server(tmp / "data", "--objects", f"s3://{bucket}/cas", *extra, env=s3.env()) as server:
        yield server, S3ObjectStore(S3Location(bucket, "cas"), S3Config.from_env(s3.env()))



def _calls(server: RunningServer) -> Counter:
    out: Counter = Counter()
    for r in server.requests():
        kind = r["path"].split("/")[2] if r["path"].startswith("/v1/") else r["path"]
        out[(r["method"], kind, r["status"])] += 1
    return out


def _keys(bucket: S3ObjectStore, prefix: str) -> dict[str, int]:
    return dict(bucket.sizes(prefix))


def _staged(bucket: S3ObjectStore) -> dict[str, int]:
    """Staged grant uploads that hold bytes (a committed grant leaves an empty marker)."""
    return {key: size for key, size in _keys(bucket, "uploads/").items() if size}


def test_our_client_puts_into_the_bucket_and_downloads_from_it(tmp_path: Path, seaweed: RunningS3) -> None:
    with s3_server(tmp_path, seaweed) as (server, bucket):
        backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY)
        with Uploader(backend, global_dedup=False) as up:
            result = up.add_bytes(DATA)
            up.finalize()
        calls = _calls(server)
        assert calls[("POST", "xorb-grants", 201)] == 1 and calls[("POST", "xorb-commits", 200)] == 1
        assert not any(kind in ("xorb-uploads", "xorbs") for _m, kind, _s in calls)
        # The xorb's bytes went to the bucket, not through the server.
        received = sum(r["bytes_in"] for r in server.requests())
        assert received < len(DATA) // 20, received
        xorbs = _keys(bucket, "xorbs/")
        assert len(xorbs) == 1 and not _staged(bucket)  # staged copy emptied at the commit
        assert not _keys(bucket, "shards/")  # a small shard lives in its index row

        plan = httpx.get(f"{server.url}/v2/reconstructions/{result.file_hex}", headers=bearer(server.token('read'))).json()
        urls = [entry["url"] for fetches in plan["xorbs"].values() for entry in fetches]
        assert urls and all(u.startswith(seaweed.endpoint + "/") for u in urls)
        before = len(server.requests())
        out = io.BytesIO()
        download(backend, result.file_hex, out, sha256_hex=hashlib.sha256(DATA).hexdigest())
        assert out.getvalue() == DATA
        assert not any(r["path"].startswith("/v1/xorb-data") for r in server.requests()[before:])


def test_hf_xet_uploads_through_grants_and_downloads_from_the_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    source = tmp_path / "model.bin"
    source.write_bytes(DATA)
    with s3_server(tmp_path, seaweed) as (server, bucket):
        token = server.token()
        (uploaded,) = hf_xet_oracle.remote_upload([source], server.url, token, tmp_path / "hf")
        calls = _calls(server)
        assert calls[("POST", "xorb-grants", 201)] >= 1 and calls[("POST", "xorb-commits", 200)] == calls[("POST", "xorb-grants", 201)]
        assert not any(kind in ("xorb-uploads", "xorbs") for _m, kind, _s in calls)
        assert not _staged(bucket)
        dest = tmp_path / "hf-out.bin"
        hf_xet_oracle.remote_download([(dest, uploaded["hash"], len(DATA))], server.url, token, tmp_path / "hf2")
        assert dest.read_bytes() == DATA
        out = io.BytesIO()
        download(HttpCasBackend(server.url, StaticToken(token)), uploaded["hash"], out)
        assert out.getvalue() == DATA


def test_huggingface_js_downloads_from_the_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    with s3_server(tmp_path, seaweed) as (server, _bucket):
        backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY)
        with Uploader(backend, global_dedup=False) as up:
            result = up.add_bytes(DATA)
            up.finalize()
        dest = tmp_path / "js"
        dest.mkdir()
        ranges = [(0, 1), (1_000_000, 2_500_001)]
        before = len(server.requests())
        hfjs_peer.download([(dest / "f", result.file_hex, len(DATA), ranges)], hfjs_peer.Endpoint(server.url, server.token(), server.token("read")))
        assert (dest / "f").read_bytes() == DATA
        for i, (start, end) in enumerate(ranges):
            assert (dest / f"f.range{i}").read_bytes() == DATA[start:end]
        assert not any(r["path"].startswith("/v1/xorb-data") for r in server.requests()[before:])


def test_bodies_that_do_not_match_are_refused_and_never_committed(tmp_path: Path, seaweed: RunningS3) -> None:
    built, _ = single_xorb(DATA)
    body = bytes(built.body)
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    with s3_server(tmp_path, seaweed) as (server, bucket):
        auth = bearer(server.token())

        def grant_for(length: int, crc: int) -> dict:
            resp = httpx.post(f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=auth, json={"length": length, "checksum": {"algo": "crc64nvme", "value": str(crc)}})
            assert resp.status_code == 201, resp.text
            assert resp.json()["url"].startswith(seaweed.endpoint + "/")
            return resp.json()

        def grant(crc: int) -> dict:
            return grant_for(len(body), crc)

        def put(g: dict, content: bytes) -> httpx.Response:
            return httpx.request(g["method"], g["url"], headers=g["headers"], content=content)

        def commit(g: dict) -> int:
            return httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/{g['id']}", headers=auth).status_code

        tampered = bytearray(body)
        tampered[len(body) // 2] ^= 1
        tampered_bytes = bytes(tampered)
        g = grant(crc64nvme_reference(body))
        refused = put(g, tampered_bytes)
        assert refused.status_code == 400 and "BadDigest" in refused.text  # the store refuses it
        assert commit(g) == 404
        # Right checksum for the body, but not the xorb it names: stored in staging, refused at commit.
        g = grant(crc64nvme_reference(tampered_bytes))
        assert put(g, tampered_bytes).status_code == 200
        assert _keys(bucket, "uploads/")
        assert commit(g) == 400 and not _staged(bucket)
        assert put(g, tampered_bytes).status_code == 412 and not _staged(bucket)  # the refused grant is used up
        # A body longer than its grant, with its own checksum: the store refuses it (the length is signed).
        huge = bytes(MAX_FETCH_RANGE_BYTES + 1)
        assert crc64nvme is not None
        g_huge = grant_for(len(body), crc64nvme(huge))
        assert put(g_huge, huge).status_code == 403
        assert commit(g_huge) == 404 and not _staged(bucket)
        # A grant whose PUT never happens.
        assert commit(grant(crc64nvme_reference(body))) == 404
        assert not _keys(bucket, "xorbs/") and not _staged(bucket)
        assert httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/..%2F..%2Fxorbs", headers=auth).status_code == 404
        # The real body: stored and committed once; the same URL again is 412 from the store.
        good = grant(crc64nvme_reference(body))
        assert put(good, body).status_code == 200
        assert put(good, body).status_code == 412
        assert commit(good) == 200
        assert list(_keys(bucket, "xorbs/")) == [f"xorbs/{xorb_hex[:2]}/{xorb_hex}"] and not _staged(bucket)
        assert put(good, body).status_code == 412 and not _staged(bucket)  # a replay after the commit stages nothing
        again = httpx.post(f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=auth, json={"length": len(body), "checksum": {"algo": "crc64nvme", "value": "1"}})
        assert again.status_code == 200


def test_a_commit_stores_the_xorb_inside_the_bucket_and_racing_commits_leave_one(tmp_path: Path, seaweed: RunningS3) -> None:
    """A committed grant becomes the stored xorb (its body and the footer we rebuild) by a copy
    inside the bucket, without the server sending the body again; two grants of one xorb with different encodings
    committed at once leave one object, which the index describes."""
    data = random_bytes(8_000_000, 41) + b"0123456789abcdef" * 250_000  # LZ4 shrinks only the second part
    digest = hash_bytes(data, with_sha256=True)
    bodies = [encoded_xorb(data, digest, scheme) for scheme in (CompressionScheme.NONE, CompressionScheme.LZ4)]
    assert bodies[0] != bodies[1] and min(map(len, bodies)) >= MIN_COPY_PART_BYTES  # both take the copy path
    xorb_hash = verify_xorb(bodies[0]).xorb_hash
    xorb_hex = hashes.hash_to_hex(xorb_hash)
    with s3_server(tmp_path, seaweed) as (server, bucket):
        auth = bearer(server.token())

        def staged(body: bytes) -> dict:
            grant = {"length": len(body), "checksum": {"algo": "crc64nvme", "value": str(crc64nvme_reference(body))}}
            g = httpx.post(f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=auth, json=grant).json()
            assert httpx.put(g["url"], headers=g["headers"], content=body).status_code == 200
            return g

        grants = [staged(body) for body in bodies]
        assert len(_keys(bucket, "uploads/")) == 2
        statuses: list[int] = []

        def commit(g: dict) -> None:
            statuses.append(httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/{g['id']}", headers=auth, timeout=60).status_code)

        threads = [threading.Thread(target=commit, args=(g,)) for g in grants]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=90)
            assert not t.is_alive(), "a commit did not finish within 90 s"
        assert statuses == [200, 200]
        (key,) = _keys(bucket, "xorbs/")
        # Made inside the bucket: a multipart upload of two parts (the copied body, the footer),
        # which is not how the server PUTs what it sends itself.
        etag = bucket.client.head_object(Bucket=bucket.bucket, Key=bucket.location.key(key))["ETag"]
        assert etag.strip('"').endswith("-2"), etag
        stored = bucket.read(key)
        (winner,) = [body for body in bodies if stored.startswith(body)]
        assert stored == winner + verify_xorb(winner).footer().serialize()  # what a POSTed upload stores
        assert not _staged(bucket)
        assert not bucket.client.list_multipart_uploads(Bucket=bucket.bucket).get("Uploads")  # the loser's copy aborted
        backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY)
        backend.upload_shard(whole_xorb_file_shard(digest, xorb_hash))
        out = io.BytesIO()
        download(backend, hashes.hash_to_hex(digest.file_hash), out, sha256_hex=hashlib.sha256(data).hexdigest())
        assert out.getvalue() == data


def test_post_xorbs_still_works_on_a_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    data = DATA + random_bytes(70_000_000, 32)  # two xorbs
    with s3_server(tmp_path, seaweed, "--no-upload-grants") as (server, bucket):
        backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY)
        with Uploader(backend, global_dedup=False) as up:
            result = up.add_bytes(data)
            up.finalize()
        assert _calls(server)[("POST", "xorbs", 200)] == 2
        assert len(_keys(bucket, "xorbs/")) == 2
        out = io.BytesIO()
        download(backend, result.file_hex, out, sha256_hex=hashlib.sha256(data).hexdigest())
        assert out.getvalue() == data


@pytest.mark.parametrize(
    ("overrides", "bucket", "message"),
    [
        ({"AWS_SECRET_ACCESS_KEY": "Wr0ngSecretValue"}, None, "secret key does not match"),
        ({}, "no-such-bucket-x", "does not exist"),
    ],
)
def test_serve_refuses_a_bucket_it_cannot_use(tmp_path: Path, seaweed: RunningS3, overrides: dict, bucket: str | None, message: str) -> None:
    name = bucket or seaweed.new_bucket()
    proc = subprocess.run(
        [sys.executable, "-m", "git_xet", "serve", "--data", str(tmp_path / "data"), "--port", "0", "--objects", f"s3://{name}"],
        capture_output=True, text=True, timeout=60, env={**_base_env(), **seaweed.env(**overrides)}, check=False,
    )  # fmt: skip
    assert proc.returncode == 1
    assert message in proc.stderr and f"s3://{name}" in proc.stderr
    assert "Wr0ngSecretValue" not in proc.stderr  # no secret in the message


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def test_a_grant_never_committed_is_collected(tmp_path: Path, seaweed: RunningS3) -> None:
    built, _ = single_xorb(DATA)
    body = bytes(built.body)
    xorb_hex = hashes.hash_to_hex(built.xorb_hash)
    with s3_server(tmp_path, seaweed) as (server, bucket):
        auth = bearer(server.token())
        g = httpx.post(
            f"{server.url}/v1/xorb-grants/default/{xorb_hex}", headers=auth,
            json={"length": len(body), "checksum": {"algo": "crc64nvme", "value": str(crc64nvme_reference(body))}},
        ).json()  # fmt: skip
        assert httpx.put(g["url"], headers=g["headers"], content=body).status_code == 200
        (staged,) = _keys(bucket, "uploads/")
        assert collect_abandoned_uploads(bucket) == 0  # fresh: its commit may still come
        assert list(_keys(bucket, "uploads/")) == [staged]
        assert collect_abandoned_uploads(bucket, now=time.time() + ABANDONED_AFTER + 60) == 1
        assert not _keys(bucket, "uploads/") and not _keys(bucket, "xorbs/")
        late = httpx.post(f"{server.url}/v1/xorb-commits/default/{xorb_hex}/grant/{g['id']}", headers=auth)
        assert late.status_code == 404  # the client then asks for a new grant
