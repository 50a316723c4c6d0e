"""Interleavings of PROCESSES against the real server (issue 46 §2): pushes through the upload
pipeline (with global dedup queries), `git xet repo delete|restore` and `git xet gc --grace 0
--retention 0`, each in its own process, started together in generated steps, on a directory
store + SQLite and on S3 (SeaweedFS) + PostgreSQL.

A step runs its processes at once: pushes (to any repositories) beside either one gc or one
delete/restore of a repository no push of the step writes (what the model can predict). A push
refused because gc removed a xorb it deduplicated against is the client's to recover from: the
pipeline uploads again (store reset), and a push process that still fails is run again, as a
user reruns `git push`; these are counted. After every schedule: `git xet fsck` is clean, every
live file reads back byte-exact, and after a last gc the xorbs stored (listed on disk or in the
bucket, not by our usage code) are exactly those the live files' reconstructions name.

The run's figures: `pytest -s tests/integration/test_gc_processes.py` prints them.
"""

from __future__ import annotations

import hashlib
import io
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.download import download
from git_xet.storage.cas_store import CasStore
from git_xet.storage.s3 import S3Config, S3Location, S3ObjectStore
from tests.support.datagen import random_bytes
from tests.support.objects import stored_objects
from tests.support.server_process import RunningServer, running_server

REPOS = ("r0", "r1", "r2")
BLOCK = 150_000
STATS: dict[str, dict[str, int]] = {}
PUSH = """
import sys
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.pipelines.upload import Uploader
url, token, path = sys.argv[1:4]
with Uploader(HttpCasBackend(url, StaticToken(token))) as up:
    up.add_bytes(open(path, "rb").read())
    up.finalize()
    print(up.stats.store_resets)
"""


@dataclass
class Store:
    server: RunningServer
    bucket: S3ObjectStore | None
    args: list[str]  # --data/--index/--objects for the admin commands
    tokens: dict[str, str]
    tmp: Path
    live: dict[str, set[tuple[int, ...]]] = field(default_factory=lambda: {r: set() for r in REPOS})  # repo -> files (as block tuples)
    trash: dict[str, set[tuple[int, ...]]] = field(default_factory=lambda: {r: set() for r in REPOS})

    def token(self, repo: str) -> str:
        if repo not in self.tokens:
            self.tokens[repo] = self.server.token("write", repo=repo)
        return self.tokens[repo]

    def xorbs(self) -> dict[str, int]:
        """The xorbs stored (key -> bytes), as the disk or the bucket lists them."""
        if self.bucket is not None:
            return dict(self.bucket.sizes("xorbs/"))
        return stored_objects(self.server.data_dir)


@pytest.fixture(params=["directory+sqlite", "s3+postgres"])
def store(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Store]:
    data = tmp_path / "data"
    args, bucket = ["--data", str(data)], None
    if request.param == "s3+postgres":
        s3, pg = request.getfixturevalue("seaweed"), request.getfixturevalue("postgres")
        name = s3.new_bucket()
        for key, value in s3.env().items():
            monkeypatch.setenv(key, value)  # the admin commands' processes inherit them
        monkeypatch.setenv("GIT_XET_SERVER_SECRET", secrets.token_hex(32))
        args += ["--index", pg.create_database(f"gcp_{secrets.token_hex(4)}"), "--objects", f"s3://{name}/srv"]
        bucket = S3ObjectStore(S3Location(name, "srv"), S3Config.from_env(s3.env()))
    with running_server(data, *args[2:]) as server:
        yield Store(server, bucket, args, {}, tmp_path)


def _content(blocks: tuple[int, ...]) -> bytes:
    """A file made of pool blocks: files sharing a block share chunks (dedup across repositories)."""
    return b"".join(random_bytes(BLOCK, 7000 + b) for b in blocks)


blocks = st.lists(st.integers(0, 3), min_size=1, max_size=3).map(tuple)  # a small pool: pushes often share chunks
# One step: a push, beside a gc, a delete or restore of ANOTHER repository (what the model can
# predict), or a second push. "delete then push+gc of the same blocks" is the race of issue 46:
# the push dedups against xorbs gc is collecting.
step = st.tuples(st.sampled_from(("gc", "delete", "restore", "push")), st.sampled_from(REPOS), blocks, st.integers(1, 2), blocks)


def _ops(kind: str, repo: str, content: tuple[int, ...], shift: int, other: tuple[int, ...]) -> list[tuple]:
    """The processes of a generated step."""
    other_repo = REPOS[(REPOS.index(repo) + shift) % len(REPOS)]
    second = {"gc": ("gc",), "delete": ("delete", other_repo), "restore": ("restore", other_repo), "push": ("push", other_repo, other)}[kind]
    return [("push", repo, content), second]


def _run(store: Store, ops: list[tuple], stats: dict[str, int]) -> None:
    procs = []
    for o in ops:
        if o[0] == "push":
            path = store.tmp / f"f{secrets.token_hex(4)}"
            path.write_bytes(_content(o[2]))
            cmd = [sys.executable, "-c", PUSH, store.server.url, store.token(o[1]), str(path)]
        elif o[0] == "gc":
            cmd = [sys.executable, "-m", "git_xet", "gc", "--grace", "0", "--retention", "0", *store.args]
        else:
            cmd = [sys.executable, "-m", "git_xet", "repo", o[0], o[1], *store.args]
        procs.append((o, cmd, subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    pushes = [proc for o, _, proc in procs if o[0] == "push"]
    for o, cmd, proc in sorted(procs, key=lambda p: p[0][0] == "push"):  # gc first: it runs again while a push does
        out, err = proc.communicate(timeout=300)
        for _more in range(30):  # gc again while a push of the step still runs (bounded)
            if o[0] != "gc" or proc.returncode != 0 or all(p.poll() is not None for p in pushes):
                break
            stats["gc"] = stats.get("gc", 0) + 1
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = proc.communicate(timeout=300)
        for _again in range(3):  # a push that failed is run again, as its user would
            if proc.returncode == 0 or o[0] != "push":
                break
            stats["pushes_rerun"] = stats.get("pushes_rerun", 0) + 1
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{o}: {err[-3000:]}"
        if o[0] == "push":
            stats["store_resets"] = stats.get("store_resets", 0) + int(out.split()[-1])
        stats[o[0]] = stats.get(o[0], 0) + 1


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(step, min_size=2, max_size=4))
def test_processes_racing_gc_keep_every_live_file_and_return_the_rest(store: Store, steps: list[tuple]) -> None:
    kind = "s3+postgres" if store.bucket is not None else "directory+sqlite"
    stats = STATS.setdefault(kind, {})
    live, trash = store.live, store.trash  # the server (and so the model) carries over between examples
    run_git = [sys.executable, "-m", "git_xet"]
    for generated in steps:
        ops = _ops(*generated)
        _run(store, ops, stats)
        for o in ops:
            if o[0] == "push":
                live[o[1]].add(o[2])
            elif o[0] == "delete":
                trash[o[1]] |= live[o[1]]
                live[o[1]] = set()
            elif o[0] == "restore":
                live[o[1]] |= trash[o[1]]
                trash[o[1]] = set()
            else:
                for r in REPOS:
                    trash[r] = set()
        stats["steps"] = stats.get("steps", 0) + 1
    deleted = {b for r in REPOS for b in trash[r]} - {b for r in REPOS for b in live[r]}
    before = store.xorbs()
    subprocess.run([*run_git, "gc", "--grace", "0", "--retention", "0", *store.args], check=True, capture_output=True, timeout=300)
    for r in REPOS:
        trash[r] = set()
    fsck = subprocess.run([*run_git, "fsck", *store.args], check=False, capture_output=True, text=True, timeout=300)
    assert fsck.returncode == 0 and "0 problems" in fsck.stdout, fsck.stdout + fsck.stderr
    named: set[str] = set()
    for repo, contents in live.items():
        backend = HttpCasBackend(store.server.url, StaticToken(store.token(repo)), extension=True)
        assert backend.extension is not None
        for blocks in contents:
            data = _content(blocks)
            file_hex = backend.extension.file_for_sha256(hashlib.sha256(data).hexdigest(), len(data))
            assert file_hex is not None, f"{repo} lost {blocks}"
            out = io.BytesIO()
            download(backend, file_hex, out)
            assert out.getvalue() == data, f"{repo}: {blocks} reads back different bytes"
            named |= {CasStore.xorb_key(t.xorb) for t in backend.reconstruction(file_hex).terms}
    after = store.xorbs()
    assert set(after) == named, f"kept {len(set(after) - named)} xorbs no live file uses; lost {len(named - set(after))}"
    stats["schedules"] = stats.get("schedules", 0) + 1
    stats["live_files_read_back"] = stats.get("live_files_read_back", 0) + sum(len(c) for c in live.values())
    stats["deleted_files"] = stats.get("deleted_files", 0) + len(deleted)
    stats["xorbs_freed_by_last_gc"] = stats.get("xorbs_freed_by_last_gc", 0) + len(set(before) - set(after))
    stats["bytes_freed_by_last_gc"] = stats.get("bytes_freed_by_last_gc", 0) + sum(n for key, n in before.items() if key not in after)


def test_zz_print_statistics() -> None:
    """The run's figures for the closing note."""
    print(f"\ngc process interleavings: {STATS}")
