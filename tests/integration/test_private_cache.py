"""What the client keeps is private to its user (git-xet issue 42 §6).

The shard cache and chunk index name content: a chunk hash works as a read capability on a
store that accepts it (another local user with any write token on the same server could
register the victim's private file in his own repo and download it). Logs and push summaries
describe the user's work. The adversary here is a real second local account: after a real push
and clone it can list or read none of it, and a debug log of a push holds none of the pushed
file's chunk hashes (computed independently with git_xet.core).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_xet.core.chunking import iter_chunks
from git_xet.core.hashes import chunk_hash, hash_to_hex, xorb_hash
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.server_process import running_server

ADVERSARY = "gitxet-other"
DATA = random_bytes(2_500_000, 90)


@pytest.fixture(scope="module")
def adversary() -> str:
    """A second local account (created once, idempotently); reads are run as it."""
    if os.name != "posix" or os.geteuid() != 0:
        message = "needs root to create a second local account (useradd) and act as it (runuser)"
        if os.environ.get("CI"):
            pytest.fail(f"{message}: CI runs the tests as root")
        pytest.skip(message)
    if subprocess.run(["id", "-u", ADVERSARY], check=False, capture_output=True).returncode != 0:
        made = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", ADVERSARY], check=False, capture_output=True, text=True)
        assert made.returncode in (0, 9), made.stderr  # 9: made meanwhile by another run
    return ADVERSARY


def _as(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["runuser", "-u", user, "--", *argv], check=False, capture_output=True, text=True, timeout=30)


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A directory everyone may traverse (pytest's tmp_path is 0700: it would hide everything
    whatever git-xet did, and the test could not fail)."""
    base = Path(tempfile.mkdtemp(prefix="git-xet-private-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _env(base: Path) -> GitEnv:
    g = make_git_env(base / "env")
    for path in (base / "env", base / "env" / "home"):
        path.chmod(0o755)
    cache = base / "cache"  # the user's own choice of $GIT_XET_CACHE: theirs, left as it is
    cache.mkdir(mode=0o755)
    cache.chmod(0o755)
    g.env["GIT_XET_CACHE"] = str(cache)
    return g


def _push_and_clone(g: GitEnv) -> tuple[Path, Path]:
    g.git("init", "--bare", "host.git")
    g.git("clone", "host.git", "work")
    work = g.root / "work"
    g.git("lfs", "track", "*.bin", cwd=work)
    (work / "model.bin").write_bytes(DATA)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    g.git("push", "origin", "main", cwd=work)
    g.git("clone", "host.git", "copy")
    return work, g.root / "copy"


def _private_things(g: GitEnv, work: Path) -> list[Path]:
    cache = Path(g.env["GIT_XET_CACHE"])
    things = [cache / "shards", Path(g.env["GIT_XET_LOG"]), work / ".git" / "xet", work / ".git" / "xet" / "pushes.jsonl"]
    for path in sorted((cache / "shards").rglob("*")):
        things.append(path)
    return things


def _assert_private(user: str, things: list[Path]) -> None:
    for path in things:
        assert path.exists(), path
        probe = ("ls", str(path)) if path.is_dir() else ("cat", str(path))
        seen = _as(user, *probe)
        assert seen.returncode != 0 and not seen.stdout, f"{user} could {probe[0]} {path}: {seen.stdout[:200]!r}"
        mode = stat.S_IMODE(path.lstat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), f"{path}: {oct(mode)}"


def test_another_local_user_can_read_nothing_the_client_keeps(adversary: str, open_base: Path) -> None:
    g = _env(open_base)
    with running_server(open_base / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        work, copy = _push_and_clone(g)
        assert (copy / "model.bin").read_bytes() == DATA
        things = _private_things(g, work)
        assert any(p.name == "index.sqlite" for p in things), things  # the cache is there to protect
        assert _as(adversary, "ls", str(g.env["GIT_XET_CACHE"])).returncode == 0  # the test can see what is not private
        _assert_private(adversary, things)
        assert stat.S_IMODE(Path(g.env["GIT_XET_CACHE"]).stat().st_mode) == 0o755  # not git-xet's: unchanged

        # As an older version left them: readable by everyone. The next push tightens them.
        for path in things:
            path.chmod(0o755 if path.is_dir() else 0o644)
        (work / "model.bin").write_bytes(DATA + b"v2")
        g.git("commit", "-am", "v2", cwd=work)
        g.git("push", "origin", "main", cwd=work)
        _assert_private(adversary, _private_things(g, work))


def test_a_debug_log_of_a_push_names_no_chunk_or_xorb_hash(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env["GIT_TRACE"] = "1"
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        _push_and_clone(g)
    chunks = list(iter_chunks([DATA]))
    digests = [chunk_hash(c) for c in chunks]
    log = g.agent_log()
    assert "uploaded" in log, log[-2000:]  # the log of this push (and of the clone after it)
    leaked = [hash_to_hex(d) for d in digests if hash_to_hex(d) in log]
    assert not leaked, f"{len(leaked)} of {len(digests)} chunk hashes in the log"
    assert hash_to_hex(xorb_hash(digests, [len(c) for c in chunks])) not in log  # one xorb holds them all


def test_a_failing_clone_names_no_chunk_or_xorb_hash_in_its_errors_or_log(tmp_path: Path) -> None:
    """The error path: the directory store lost the file's xorb; the clone fails and says so
    (with the xorb's short prefix only), and neither git's output nor the log holds a hash that
    could be used to ask a store for the content."""
    g = make_git_env(tmp_path)
    store = tmp_path / "store"
    g.git_xet("install", "--standalone", str(store))
    _push_and_clone(g)
    chunks = list(iter_chunks([DATA]))
    digests = [chunk_hash(c) for c in chunks]
    xorb_hex = hash_to_hex(xorb_hash(digests, [len(c) for c in chunks]))
    (stored,) = [p for p in store.rglob(f"*{xorb_hex}*") if p.is_file()]
    stored.unlink()
    shutil.rmtree(g.root / "copy")
    failed = g.git("clone", "host.git", "copy", check=False)
    assert failed.returncode != 0 and xorb_hex[:12] in failed.stderr, failed.stderr
    for text in (failed.stdout + failed.stderr, g.agent_log()):
        assert xorb_hex not in text
        assert not [d for d in digests if hash_to_hex(d) in text]
