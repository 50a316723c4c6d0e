"""A store that lost data the shard cache remembers (reset, or restored from an older backup):
the upload pipeline notices the refused shard, forgets the cache, re-uploads and succeeds.

Both backends: the real `git xet serve` process on 127.0.0.1 (stopped, its data directory wiped
or restored, started again on the same port, so the endpoint and thus the cache key stay the
same) and the serverless local store (its directory wiped or restored in place).
"""

from __future__ import annotations

import io
import logging
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from git_xet.client.backend import XetBackend
from git_xet.client.backend import UploadStream
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.retry import RetryPolicy
from git_xet.client.shard_cache import ShardCache
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.download import download
from git_xet.pipelines.upload import Uploader
from git_xet.core.http_headers import bearer
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.server_process import running_server

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05)


class _Store:
    """One store of either kind that can be stopped, have its data replaced, and come back at
    the same address."""

    def __init__(self, kind: str, root: Path) -> None:
        self.kind = kind
        self.data = root / "data"
        self.port = 0
        self.backend: XetBackend

    @contextmanager
    def up(self) -> Iterator[XetBackend]:
        if self.kind == "local":
            self.backend = LocalStoreBackend(self.data)
            yield self.backend
            return
        with running_server(self.data, port=self.port) as srv:
            self.port = int(srv.url.rsplit(":", 1)[1])
            # A wiped server makes a new signing secret: a new token, the same endpoint.
            self.backend = HttpCasBackend(srv.url, StaticToken(srv.token("write")), policy=FAST_RETRY)
            yield self.backend


def _upload(backend: XetBackend, cache_root: Path, *files: bytes) -> tuple[Uploader, list[str]]:
    with Uploader(backend, ShardCache(cache_root, backend.cache_key)) as up:
        hashes = [up.add_bytes(data).file_hex for data in files]
        up.last_results = up.finalize()
    assert [r.file_hex for r in up.last_results] == hashes
    return up, hashes


def _download(backend: XetBackend, file_hex: str) -> bytes:
    out = io.BytesIO()
    download(backend, file_hex, out)
    return out.getvalue()


@pytest.mark.parametrize("kind", ["local", "http"])
def test_push_after_the_store_was_wiped_reuploads_what_it_lost(kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, cache = _Store(kind, tmp_path), tmp_path / "cache"
    a = random_bytes(6_000_000, 41)
    with store.up() as backend:
        first, _ = _upload(backend, cache, a)
    assert first.stats.xorbs_uploaded == 1 and first.stats.store_resets == 0
    shutil.rmtree(store.data)

    b = a + random_bytes(2_000_000, 42)  # dedups against a's cached xorb, which is gone
    with store.up() as backend, caplog.at_level(logging.WARNING, logger="git_xet.upload"):
        up, (b_hash,) = _upload(backend, cache, b)
        assert up.stats.store_resets == 1
        assert up.last_results[0].new_bytes == len(b)  # what finalize reports: all sent again
        assert up.stats.shards_uploaded == 1  # the refused shard is not counted
        # Everything went again: a's chunks as well as b's own.
        assert up.stats.xorb_bytes_sent >= len(b)
        assert _download(backend, b_hash) == b
        assert "lacks xorbs this machine's shard cache says it holds" in caplog.text
        assert "re-uploaded 1 file(s)" in caplog.text

        # What the cache knows now is true again: the same content dedups fully, no refusal.
        again, _ = _upload(backend, cache, b)
        assert again.stats.store_resets == 0 and again.stats.xorb_bytes_sent == 0


@pytest.mark.parametrize("kind", ["local", "http"])
def test_push_after_the_store_was_restored_from_an_older_copy(kind: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store, cache = _Store(kind, tmp_path), tmp_path / "cache"
    old, new = random_bytes(3_000_000, 43), random_bytes(4_000_000, 44)
    with store.up() as backend:
        _, (old_hash,) = _upload(backend, cache, old)
    shutil.copytree(store.data, tmp_path / "backup")
    with store.up() as backend:
        _upload(backend, cache, new)
    shutil.rmtree(store.data)
    shutil.copytree(tmp_path / "backup", store.data)  # the store goes back to before `new`

    mixed = new[:2_500_000] + old + b"tail"
    with store.up() as backend, caplog.at_level(logging.WARNING, logger="git_xet.upload"):
        up, (mixed_hash, _) = _upload(backend, cache, mixed, old)
        assert up.stats.store_resets == 1
        assert _download(backend, mixed_hash) == mixed
        assert _download(backend, old_hash) == old  # what the backup held is untouched
        assert "re-uploaded 2 file(s)" in caplog.text


def test_a_store_that_stays_inconsistent_fails_with_a_clear_message(tmp_path: Path) -> None:
    """A store that keeps refusing (it loses xorbs as fast as they come) is reported, not looped on."""

    class Forgetful(LocalStoreBackend):
        def upload_xorb(self, xorb_hex: str, body: bytes | memoryview, stream: UploadStream | None = None) -> bool:
            return True  # claims to store, keeps nothing

        def upload_xorbs_with_shard(self, xorbs: Sequence[tuple[str, bytes | memoryview]], shard: bytes, stream_id: str | None = None) -> bool:
            return self.upload_shard(shard)  # the same with a small file's xorbs

    backend = Forgetful(tmp_path / "data")
    with Uploader(backend, ShardCache(tmp_path / "cache", backend.cache_key)) as up:
        up.add_bytes(random_bytes(1_000_000, 45))
        with pytest.raises(Exception, match="store itself is inconsistent") as refused:
            up.finalize()
    assert type(refused.value).__name__ == "MissingXorbsError"
    assert up.stats.store_resets == 1


# ---------------------------------------------------------------- real git and git-lfs


def _commit_and_push(g: GitEnv, work: Path, files: dict[str, bytes], message: str, remove: tuple[str, ...] = ()) -> None:
    for name, data in files.items():
        (work / name).write_bytes(data)
    for name in remove:
        g.git("rm", "-q", name, cwd=work)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", message, cwd=work)
    g.git("push", "origin", "main", cwd=work)  # check=True: it must succeed in one go


def _fresh_clone_matches(g: GitEnv, remote: str, name: str, expected: dict[str, bytes]) -> None:
    g.git("clone", remote, name)
    for file, data in expected.items():
        assert (g.root / name / file).read_bytes() == data, file
    assert "Git LFS fsck OK" in g.git("lfs", "fsck", cwd=g.root / name).stdout


def test_git_push_to_a_wiped_then_restored_server(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="2", GIT_XET_RETRY_BASE_DELAY="0.05")
    data, backup = tmp_path / "srv" / "data", tmp_path / "backup"
    a, c = random_bytes(5_000_000, 51), random_bytes(5_000_000, 52)
    with running_server(data) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        g.git("init", "--bare", "remote.git")
        g.git("clone", "remote.git", "work")
        work = g.root / "work"
        g.git("lfs", "track", "*.bin", cwd=work)
        _commit_and_push(g, work, {"a.bin": a}, "a")

    # 1. The server's data is wiped. A new repository pushes content built from a.bin: it
    # dedups against the cached xorbs, which the server no longer has.
    shutil.rmtree(data)
    with running_server(data, port=port) as srv:
        g.git("config", "--global", "xet.token", srv.token("write"))
        g.git("init", "--bare", "remote2.git")
        g.git("clone", "remote2.git", "work2")
        work2 = g.root / "work2"
        g.git("lfs", "track", "*.bin", cwd=work2)
        b = a[:4_000_000] + random_bytes(1_000_000, 53)
        _commit_and_push(g, work2, {"b.bin": b}, "b")
        _fresh_clone_matches(g, "remote2.git", "clone2", {"b.bin": b})
    log = g.agent_log()
    assert log.count("lacks xorbs this machine's shard cache says it holds") == 1
    assert "re-uploaded 1 file(s) to the reset store" in log

    # 2. The server is restored from a backup older than the last push.
    with running_server(data, port=port) as srv:
        g.git("config", "--global", "xet.token", srv.token("write"))
        g.git("lfs", "push", "--all", "origin", cwd=work)  # the wiped server gets a.bin back
        assert g.agent_log().count("lacks xorbs") == 1  # deduped against b's xorbs: cached after the reset, valid
        shutil.copytree(data, backup)
        _commit_and_push(g, work, {"c.bin": c}, "c")
    shutil.rmtree(data)
    shutil.copytree(backup, data)
    with running_server(data, port=port) as srv:
        g.git("config", "--global", "xet.token", srv.token("write"))
        d = c[:3_000_000] + a[1_000_000:]
        _commit_and_push(g, work, {"d.bin": d}, "d, without c", remove=("c.bin",))
        _fresh_clone_matches(g, "remote.git", "clone3", {"a.bin": a, "d.bin": d})
    log = g.agent_log()
    assert log.count("lacks xorbs this machine's shard cache says it holds") == 2
    assert log.count("to the reset store") == 2


def test_the_server_names_a_missing_xorb_refusal_with_a_stable_code(tmp_path: Path) -> None:
    """v1 (JSON error answer) and v2 (NDJSON error frame) both carry `code` beside the message."""
    import json

    import httpx

    from git_xet.core.hashes import chunk_hash
    from git_xet.core.shard import CasInfo, Shard, serialize_shard

    chunk = b"a chunk of a xorb that was never uploaded"
    shard = Shard(cas=(CasInfo.from_chunks(bytes(range(32)), [chunk_hash(chunk)], [len(chunk)], 100),))
    body = serialize_shard(shard, with_footer=False)
    with running_server(tmp_path / "data") as srv:
        headers = bearer(srv.token('write'))
        v1 = httpx.post(f"{srv.url}/v1/shards", content=body, headers=headers)
        v2 = httpx.post(f"{srv.url}/v2/shards", content=body, headers=headers)
    assert v1.status_code == 400
    assert v1.json()["code"] == "missing_xorb" and "never uploaded" in v1.json()["error"]
    (error,) = [f for f in map(json.loads, v2.text.splitlines()) if f["type"] == "error"]
    assert error["code"] == "missing_xorb" and "never uploaded" in error["message"] and error["retryable"] is False
