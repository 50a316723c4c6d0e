"""The benchmark's plain LFS server (bench/lfs_basic_server.py): git-lfs basic's baseline. It
stores an upload under the oid in its URL; with verify_sha256 it first checks that the body
hashes to that oid, as `git xet serve` checks each claimed sha256, and refuses it otherwise
without storing anything; with fsync=False (many_files.py's baseline, as Gitea stores) it
answers before the object is synced, and stores the same. Run for real, on loopback."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import lfs_basic_server

COPY = 1 << 20  # the server's read size: bodies around it are hashed across several reads


@pytest.fixture(params=[(False, True), (True, True), (False, False)], ids=["unchecked", "checked", "unchecked-unsynced"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path, bool]]:
    checked, fsync = request.param
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), lfs_basic_server.make_handler(tmp_path, verify_sha256=checked, fsync=fsync))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", tmp_path, checked
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)


def _body(size: int) -> bytes:
    return hashlib.shake_256(size.to_bytes(8, "big")).digest(size) if size else b""


@pytest.mark.parametrize("size", [0, 1, COPY - 1, COPY + 1, 3 * COPY])
def test_an_upload_under_its_own_sha256_is_stored_either_way(server: tuple[str, Path, bool], size: int) -> None:
    url, root, _checked = server
    body = _body(size)
    oid = hashlib.sha256(body).hexdigest()
    assert httpx.put(f"{url}/objects/{oid}", content=body, timeout=60).status_code == 200
    assert (root / "objects" / oid).read_bytes() == body
    assert httpx.get(f"{url}/objects/{oid}", timeout=60).content == body


@pytest.mark.parametrize("size", [1, COPY + 1])
def test_an_upload_under_another_oid_is_refused_only_by_the_checking_server(server: tuple[str, Path, bool], size: int) -> None:
    url, root, checked = server
    body = _body(size)
    claimed = hashlib.sha256(body + b"x").hexdigest()
    answer = httpx.put(f"{url}/objects/{claimed}", content=body, timeout=60)
    objects = root / "objects"
    if checked:
        assert answer.status_code == 422
        assert hashlib.sha256(body).hexdigest() in answer.json()["message"]
        assert list(objects.iterdir()) == []  # neither the object nor its temp file
        assert httpx.get(f"{url}/objects/{claimed}", timeout=60).status_code == 404
    else:  # the baseline as the push target was set: it streams bytes and checks nothing
        assert answer.status_code == 200
        assert (objects / claimed).read_bytes() == body
    logged = [json.loads(line) for line in (root / "requests.jsonl").read_text().splitlines()]
    assert [r["bytes_in"] for r in logged if r["method"] == "PUT"] == [size]  # what the benchmark counts as sent
