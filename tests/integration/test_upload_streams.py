"""Upload streams end to end: our client numbers the xorbs of a large file, the real server
hashes its sha256 while they arrive (directly posted or through upload grants, into one
server process or two), and the
shard then only waits for the rest; a wrong oid is still refused, a client that names no
stream (hf-xet) is verified as before, and another token holder cannot touch a client's
stream."""

from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path

import pytest

from git_xet.client.backend import UploadStream
from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.tokens import StaticToken
from git_xet.core import hashes
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import WITH_SHARD_BELOW, Uploader
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)
MIB = 1 << 20
# Two full xorbs and a small last one, which goes with the shard.
SIZE = 128 * MIB + 300_000
STREAMED = re.compile(r"sha256 of file (\w+): (\d+) of its (\d+) bytes hashed as they were uploaded")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("src") / "model.bin"
    path.write_bytes(random_bytes(SIZE, 77))
    return path


def _upload(server: RunningServer, path: Path, oid: str) -> str:
    """As the agent uploads to a `git xet serve`: the oid sent as the claim, the last small
    xorb in one request with the shard."""
    backend = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY, extension=True)
    with Uploader(backend, global_dedup=False) as up:
        result = up.add_file(path, sha256_hex=oid)
        up.finalize()
    return result.file_hex


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("grants", [True, False])
def test_the_server_hashes_a_large_file_while_its_xorbs_arrive(tmp_path: Path, source: Path, grants: bool, workers: int) -> None:
    """With two workers the xorbs may land in either, and a stream is per worker: the shard's
    worker uses its own stream only when it begins the file, so only one is sure to stream."""
    oid = hashlib.sha256(source.read_bytes()).hexdigest()
    with running_server(tmp_path / "data", "--workers", str(workers), "--upload-grants", "always" if grants else "never") as server:
        file_hex = _upload(server, source, oid)
        streamed = STREAMED.findall(server.log())
        if workers == 1:
            (found,) = streamed
            assert found[0] == file_hex[:12]
            assert int(found[1]) > SIZE - WITH_SHARD_BELOW and int(found[2]) == SIZE  # both big xorbs; the last one read
        assert all(found[0] == file_hex[:12] and int(found[2]) == SIZE for found in streamed)
        assert ("/v1/xorb-uploads/" in server.log()) == grants
        assert "/git-xet/v1/upload-bundles" in server.log()
        out = io.BytesIO()
        download(HttpCasBackend(server.url, StaticToken(server.token("read"))), file_hex, out, sha256_hex=oid)
        assert out.getvalue() == source.read_bytes()


def test_a_wrong_oid_is_refused_though_its_xorbs_were_hashed_on_arrival(tmp_path: Path, source: Path) -> None:
    with running_server(tmp_path / "data", "--workers", "1") as server:  # one: its stream is sure to hold the file
        with pytest.raises(TransferError, match="does not match its content"):
            _upload(server, source, "0" * 64)
        assert STREAMED.search(server.log())  # the streamed digest is what refused it


def test_a_client_that_names_no_stream_is_verified_as_before(tmp_path: Path, source: Path) -> None:
    with running_server(tmp_path / "data") as server:
        (uploaded,) = hf_xet_oracle.remote_upload([source], server.url, server.token(), tmp_path / "hf")
        assert uploaded["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
        assert not STREAMED.search(server.log())
        out = io.BytesIO()
        download(HttpCasBackend(server.url, StaticToken(server.token("read"))), uploaded["hash"], out, sha256_hex=uploaded["sha256"])
        assert out.getvalue() == source.read_bytes()


def test_another_token_naming_a_clients_stream_cannot_touch_it(tmp_path: Path, source: Path) -> None:
    """An attacker who knows a client's stream id (here: told it) and holds a valid write token
    stores a xorb as that stream's first one, and sends a shard naming it; the client's
    stream is keyed by its own token, so its upload still ends in the shortcut, whole."""
    oid = hashlib.sha256(source.read_bytes()).hexdigest()
    with running_server(tmp_path / "data", "--workers", "1") as server:
        victim = HttpCasBackend(server.url, StaticToken(server.token()), policy=FAST_RETRY, extension=True)
        attacker = HttpCasBackend(server.url, StaticToken(server.token(repo="mallory/evil")), policy=FAST_RETRY, extension=True)  # sends stream headers
        with Uploader(victim, global_dedup=False) as up:
            stream_id = up._stream_id
            planted, _ = single_xorb(random_bytes(200_000, 78))
            assert attacker.extension is not None
            assert attacker.extension.upload_xorb(hashes.hash_to_hex(planted.xorb_hash), planted.body, UploadStream(stream_id, 0))
            result = up.add_file(source, sha256_hex=oid)
            up.finalize()
        (found,) = STREAMED.findall(server.log())
        assert found[0] == result.file_hex[:12] and int(found[1]) > SIZE - WITH_SHARD_BELOW
        assert "upload stream broken" not in server.log()
