"""Real git and git-lfs (3.x) pushing and cloning through `git xet transfer`."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from git_xet.storage.cas_store import CasStore
from tests.datagen import random_bytes
from tests.gitenv import GitEnv, make_git_env


def _stored_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "xorbs").rglob("*") if p.is_file())


def _push_first_commit(g: GitEnv, files: dict[str, bytes]) -> Path:
    g.git("init", "--bare", "remote.git")
    g.git("clone", "remote.git", "work")
    work = g.root / "work"
    g.git("lfs", "track", "*.bin", cwd=work)
    for name, data in files.items():
        (work / name).write_bytes(data)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    g.git("push", "origin", "main", cwd=work)
    return work


def test_push_and_clone_through_the_local_store(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    store = tmp_path / "xet-store"
    out = g.git_xet("install", "--standalone", str(store))
    assert "registered the transfer agent" in out.stdout
    files = {"model.bin": random_bytes(6_000_000, 1), "zeros.bin": bytes(2_000_000), "notes.txt": b"plain git\n"}
    work = _push_first_commit(g, files)
    cas = CasStore(store)
    for name in ("model.bin", "zeros.bin"):
        assert cas.file_by_sha256(hashlib.sha256(files[name]).hexdigest()) is not None

    g.git("clone", "remote.git", "clone2")
    for name, data in files.items():
        assert (g.root / "clone2" / name).read_bytes() == data
    fsck = g.git("lfs", "fsck", cwd=g.root / "clone2")
    assert "Git LFS fsck OK" in fsck.stdout

    # v2: an edit plus an insertion; only the changed chunks travel.
    v2 = bytearray(files["model.bin"])
    v2[3_000_000:3_000_000] = b"inserted bytes"
    (work / "model.bin").write_bytes(bytes(v2))
    g.git("commit", "-am", "v2", cwd=work)
    before = _stored_bytes(store)
    g.git("push", "origin", "main", cwd=work)
    assert _stored_bytes(store) - before < 0.05 * len(v2)
    g.git("pull", cwd=g.root / "clone2")
    assert (g.root / "clone2" / "model.bin").read_bytes() == bytes(v2)


def test_agent_errors_are_readable_in_git_output(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git_xet("install")  # registered, but no store configured
    g.git("config", "--global", "lfs.standalonetransferagent", "xet")
    g.git("init", "--bare", "remote.git")
    g.git("clone", "remote.git", "work")
    work = g.root / "work"
    g.git("lfs", "track", "*.bin", cwd=work)
    (work / "a.bin").write_bytes(b"x" * 1000)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0
    assert "git xet install --standalone" in push.stderr


@pytest.mark.parametrize("scope", ["--global", "--local"])
def test_install_is_idempotent_and_uninstall_cleans_up(tmp_path: Path, scope: str) -> None:
    g = make_git_env(tmp_path)
    g.git("init", "repo")
    repo = g.root / "repo"
    for _ in range(2):
        g.git_xet("install", scope, "--standalone", str(tmp_path / "s"), cwd=repo)
    listing = g.git("config", scope, "--list", cwd=repo).stdout
    assert listing.count("lfs.customtransfer.xet.path=") == 1
    assert "lfs.standalonetransferagent=xet" in listing
    g.git_xet("uninstall", scope, cwd=repo)
    listing = g.git("config", scope, "--list", cwd=repo).stdout
    assert "customtransfer.xet" not in listing and "standalonetransferagent" not in listing and "xet.endpoint" not in listing
