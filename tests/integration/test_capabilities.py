"""Our extension's one capabilities request (core/extension.py) against the real `git xet
serve`: listed behind a token, what a directory server offers; a whole object's file hash named
in our namespace; and what agents of the previous release send (server/deprecated.py: the old
upload stream header, the old whole-object route and its header) still works."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import httpx

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.core import extension, hashes, shard
from git_xet.core.extension import Capabilities
from git_xet.core.http_headers import FILE_HASH, bearer
from git_xet.pipelines.upload import Uploader
from git_xet.server import deprecated
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.server_process import running_server

STREAMED = re.compile(r"sha256 of file (\w+): (\d+) of its (\d+) bytes hashed as they were uploaded")


def test_capabilities_are_listed_behind_a_token(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as server, httpx.Client(timeout=60) as client:
        url = f"{server.url}{extension.CAPABILITIES}"
        assert client.get(url).status_code == 401
        assert client.get(url, headers=bearer("not-a-token")).status_code == 401
        resp = client.get(url, headers=bearer(server.token("read")))
        assert resp.status_code == 200, resp.text
        offered = Capabilities.from_json(resp.json())
        # A directory server offers no grants (--upload-grants auto), everything else of ours.
        assert offered == Capabilities(upload_bundles=True, lfs_objects=True, upload_streams=True, locks=True, checks_sha256_claims=True)


def test_the_previous_releases_stream_header_is_still_taken(tmp_path: Path) -> None:
    """An older agent names its upload stream with X-Xet-Upload-Stream: the server still hashes
    its xorbs as they arrive, and the shard's registration uses that digest."""
    data = random_bytes(3 << 20, 91)
    built, digest = single_xorb(data)
    stream = os.urandom(8).hex()
    term = shard.FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes))
    info = shard.FileInfo(digest.file_hash, (term,), (hashes.verification_hash(built.chunk_hashes),), hashlib.sha256(data).digest())
    body = shard.serialize_shard(shard.Shard((info,)), with_footer=False)
    with running_server(tmp_path / "data", "--workers", "1") as server, httpx.Client(timeout=120) as client:
        token = server.token()
        xorb_url = f"{server.url}/v1/xorbs/default/{hashes.hash_to_hex(built.xorb_hash)}"
        assert client.post(xorb_url, content=built.body, headers={**bearer(token), deprecated.UPLOAD_STREAM: f"{stream} 0"}).status_code == 200
        resp = client.post(f"{server.url}/v1/shards", content=body, headers={**bearer(token), deprecated.UPLOAD_STREAM: stream})
        assert resp.status_code == 200 and resp.json() == {"result": 1}, resp.text
        (found,) = STREAMED.findall(server.log())
        assert found[0] == hashes.hash_to_hex(digest.file_hash)[:12] and int(found[1]) == int(found[2]) == len(data)


def test_a_whole_object_names_its_file_in_our_namespace_and_the_old_route_the_old_way(tmp_path: Path) -> None:
    """GET /git-xet/v1/lfs-objects/{oid} names the file hash in X-Git-Xet-Hash and sends no
    X-Xet- header (that prefix is the XET protocol's); the previous release's route keeps the
    Hub's X-Xet-Hash its agents were sent."""
    data = random_bytes(30_000, 92)
    oid = hashlib.sha256(data).hexdigest()
    with running_server(tmp_path / "data") as server, httpx.Client(timeout=60) as client:
        with Uploader(HttpCasBackend(server.url, StaticToken(server.token()), extension=True), global_dedup=False) as up:
            file_hex = up.add_bytes(data).file_hex
            up.finalize()
        read = bearer(server.token("read"))
        new = client.get(f"{server.url}{extension.LFS_OBJECTS}/{oid}", headers=read)
        assert new.status_code == 200 and new.content == data
        assert new.headers[extension.FILE_HASH] == file_hex
        assert [name for name in new.headers if name.lower().startswith("x-xet-")] == []
        old = client.get(f"{server.url}{deprecated.LFS_OBJECTS.format(oid=oid)}", headers=read)
        assert old.status_code == 200 and old.content == data
        assert old.headers[FILE_HASH] == file_hex and extension.FILE_HASH not in old.headers
