"""`git xet migrate DIR s3://...`: a directory store's objects into a bucket, for the server
(`serve --objects`) or as a serverless bucket store; resumable and idempotent."""

from __future__ import annotations

import hashlib
import io
import subprocess
from pathlib import Path

from git_xet.client.bucket_backend import BucketBackend
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.storage.packed_objects import FILE_NAME as PACKED_FILE
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.gitenv import run_git_xet
from tests.support.objects import stored_objects
from tests.support.seaweed import RunningS3
from tests.support.server_process import running_server

# Each its own xorb: two stored as files, the small one packed (objects.PACKED_BELOW).
FILES = [random_bytes(5_000_000, 61), random_bytes(2_000_000, 62), random_bytes(20_000, 63)]


def _migrate(s3: RunningS3, *args: str) -> subprocess.CompletedProcess[str]:
    return run_git_xet("migrate", *args, timeout=300, env=_env(s3))


def _env(s3: RunningS3) -> dict[str, str]:
    import os

    return {**{k: v for k, v in os.environ.items() if not k.startswith("AWS_")}, **s3.env()}


def _fill(store_dir: Path) -> list[str]:
    hashes = []
    with Uploader(LocalStoreBackend(store_dir)) as up:
        for data in FILES:
            hashes.append(up.add_bytes(data).file_hex)
            up.finalize()
    return hashes


def test_a_server_moves_its_objects_to_a_bucket(tmp_path: Path, seaweed: RunningS3) -> None:
    data = tmp_path / "data"
    file_hashes = _fill(data)  # the same format as `git xet serve --data`
    bucket = seaweed.new_bucket()
    target = f"s3://{bucket}/cas"
    first = _migrate(seaweed, str(data), target)
    assert first.returncode == 0, first.stderr
    objects = S3ObjectStore(S3Location(bucket, "cas"), S3Config.from_env(seaweed.env()))
    expected = {**stored_objects(data, "xorbs/"), **stored_objects(data, "shards/")}
    assert len([key for key in expected if key.startswith("xorbs/")]) == len(FILES)
    assert (data / PACKED_FILE).is_file() and (data / "xorbs").is_dir()  # both kinds were copied
    assert dict(objects.sizes()) == expected
    again = _migrate(seaweed, str(data), target)  # resumable: nothing copied twice
    assert again.returncode == 0 and f"copied 0 objects (0 bytes); {len(expected)} were in" in again.stdout
    for path in [*(data / "xorbs").rglob("*"), data / PACKED_FILE]:  # the server must now read the bucket, not the directory
        if path.is_file():
            path.unlink()
    with running_server(data, "--objects", target, env=seaweed.env()) as server:
        backend = HttpCasBackend(server.url, StaticToken(server.token("read")))
        for file_hash, content in zip(file_hashes, FILES):
            out = io.BytesIO()
            download(backend, file_hash, out, sha256_hex=hashlib.sha256(content).hexdigest())
            assert out.getvalue() == content


def test_a_directory_store_becomes_a_bucket_store(tmp_path: Path, seaweed: RunningS3) -> None:
    store = tmp_path / "store"
    file_hashes = _fill(store)
    bucket = seaweed.new_bucket()
    done = _migrate(seaweed, str(store), f"s3://{bucket}", "--standalone")
    assert done.returncode == 0, done.stderr
    backend = BucketBackend(S3ObjectStore(S3Location(bucket), S3Config.from_env(seaweed.env())))
    for file_hash, content in zip(file_hashes, FILES):
        assert backend.file_for_sha256(hashlib.sha256(content).hexdigest()) == file_hash
        out = io.BytesIO()
        download(backend, file_hash, out, sha256_hex=hashlib.sha256(content).hexdigest())
        assert out.getvalue() == content


def test_migrate_says_what_is_wrong(tmp_path: Path, seaweed: RunningS3) -> None:
    not_a_store = tmp_path / "empty"
    not_a_store.mkdir()
    refused = _migrate(seaweed, str(not_a_store), f"s3://{seaweed.new_bucket()}")
    assert refused.returncode == 1 and "not a git-xet data directory" in refused.stderr
    store = tmp_path / "store"
    _fill(store)
    missing = _migrate(seaweed, str(store), "s3://no-such-bucket-y")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
