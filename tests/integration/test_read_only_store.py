"""A directory store that cannot be written (a backup snapshot, a read-only share for CI) can
still be read: a clone comes back byte-identical, and a push is refused with what to do.

The store is mounted read-only in a private mount namespace (`unshare -m`, a read-only bind
mount), so even root cannot write it, as on a real read-only mount."""

from __future__ import annotations

import os
import shlex
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.support.datagen import random_bytes
from tests.support.gitenv import make_git_env

pytestmark = pytest.mark.skipif(os.name != "posix" or os.geteuid() != 0, reason="a mount namespace needs root (CI runs as root)")

# Sizes around the store's two homes for an object: rows of objects.sqlite below 128 KiB, files above.
SIZES = (0, 1_000, 100_000, 300_000, 3_000_000)


def _closed_cleanly(store: Path) -> None:
    """Leave the store as after its last writer closed: SQLite checkpoints the WAL and removes
    the -wal and -shm files (what a snapshot of an idle store holds)."""
    for name in ("index.sqlite", "objects.sqlite"):
        if (store / name).exists():
            conn = sqlite3.connect(store / name)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.close()
    assert not (store / "index.sqlite-wal").exists()


@pytest.mark.parametrize("idle", [False, True], ids=["wal-files-present", "closed-cleanly"])
def test_a_read_only_store_serves_clones_and_refuses_pushes_with_the_reason(tmp_path: Path, idle: bool) -> None:
    g = make_git_env(tmp_path)
    store = tmp_path / "store"
    g.git_xet("install", "--standalone", str(store))
    g.git("init", "-q", "--bare", "remote.git")
    g.git("clone", "-q", "remote.git", "work")
    work = tmp_path / "work"
    g.git("lfs", "track", "*.bin", cwd=work)
    for i, size in enumerate(SIZES):
        (work / f"f{i}.bin").write_bytes(random_bytes(size, i))
    g.git("add", ".", cwd=work)
    g.git("commit", "-qm", "v1", cwd=work)
    g.git("push", "-q", "origin", "main", cwd=work)
    if idle:
        _closed_cleanly(store)
    before = sorted((p.relative_to(store).as_posix(), p.stat().st_size) for p in store.rglob("*") if p.is_file())

    view = tmp_path / "read-only-view"
    view.mkdir()
    g.git_xet("install", "--standalone", str(view))  # (installs over the empty mount point)
    script = " && ".join(
        [
            f"mount --bind {shlex.quote(str(store))} {shlex.quote(str(view))}",
            f"mount -o remount,ro,bind {shlex.quote(str(view))}",
            f"git clone -q {shlex.quote(str(tmp_path / 'remote.git'))} clone",
            "cd clone && (echo new > new.bin; git add new.bin; git commit -qm v2; git push origin main 2> ../push.err; echo $? > ../push.rc)",
        ]
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], cwd=tmp_path, env=g.env, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    for i, size in enumerate(SIZES):
        assert (tmp_path / "clone" / f"f{i}.bin").read_bytes() == random_bytes(size, i)
    assert (tmp_path / "push.rc").read_text().strip() != "0"
    refused = (tmp_path / "push.err").read_text()
    assert "is read-only here" in refused and "needs write access" in refused, refused
    after = sorted((p.relative_to(store).as_posix(), p.stat().st_size) for p in store.rglob("*") if p.is_file())
    assert after == before  # nothing written, not even a lock file


def test_a_server_serves_a_read_only_data_directory_for_clones_and_refuses_pushes(tmp_path: Path) -> None:
    """`git xet serve --data` on a read-only mount (a backup snapshot): no lock file, no
    cleanup, clones byte-identical, a push refused with the reason, nothing written."""
    from tests.support.gitenv import run_git_xet
    from tests.support.server_process import running_server

    data, view = tmp_path / "srv" / "data", tmp_path / "srv" / "view"
    g = make_git_env(tmp_path / "client")
    with running_server(data) as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        g.git("init", "-q", "--bare", "remote.git")
        g.git("clone", "-q", "remote.git", "work")
        work = g.root / "work"
        g.git("lfs", "track", "*.bin", cwd=work)
        for i, size in enumerate(SIZES):
            (work / f"f{i}.bin").write_bytes(random_bytes(size, 10 + i))
        g.git("add", ".", cwd=work)
        g.git("commit", "-qm", "v1", cwd=work)
        g.git("push", "-q", "origin", "main", cwd=work)
    before = sorted((p.relative_to(data).as_posix(), p.stat().st_size) for p in data.rglob("*") if p.is_file() and p.name != "server.lock")
    view.mkdir()
    mount = 'mount --bind "$1" "$2" && mount -o remount,ro,bind "$2" && shift 2 && exec "$@"'
    wrapper = ("unshare", "-m", "sh", "-c", mount, "sh", str(data), str(view))
    with running_server(view, "--workers", "1", wrapper=wrapper) as ro:
        token = run_git_xet("token", "--data", str(data), "--scope", "write", timeout=60, check=True).stdout.strip()  # the same secret
        g.git_xet("install", "--standalone", ro.url)
        g.git("config", "--global", "xet.token", token)
        g.git("clone", "-q", "remote.git", "clone")
        for i, size in enumerate(SIZES):
            assert (g.root / "clone" / f"f{i}.bin").read_bytes() == random_bytes(size, 10 + i)
        (work / "new.bin").write_bytes(random_bytes(200_000, 99))
        g.git("add", "new.bin", cwd=work)
        g.git("commit", "-qm", "v2", cwd=work)
        push = g.git("push", "origin", "main", cwd=work, check=False)
        assert push.returncode != 0 and "read-only" in push.stderr, push.stderr
        assert "serving it read-only" in ro.log()
    after = sorted((p.relative_to(data).as_posix(), p.stat().st_size) for p in data.rglob("*") if p.is_file() and p.name != "server.lock")
    assert after == before
