"""Each repository's Git LFS endpoint on `git xet serve` (git-xet issue 45 §1, §5, §6).

A committed `.lfsconfig` (`git xet setup-repo URL`) makes a plain `git clone` work for every
teammate: Alice has the agent registered (`git xet install`: xet both ways), Bob has stock
git-lfs only (`basic` both ways: PUTs stored as XET on the server, downloads from the bridge).
Real git and git-lfs (the system's 3.3.0 and 3.6.1 from install/peers.sh), our server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.objects import stored_objects
from tests.support.server_process import RunningServer, running_server

REPO_ROOT = Path(__file__).resolve().parents[2]
LFS_361 = REPO_ROOT / ".cache" / "git-lfs-3.6.1"
REPO = "acme/models"


@pytest.fixture(params=["system", "3.6.1"])
def lfs_path(request: pytest.FixtureRequest) -> str:
    """The PATH prefix that picks the git-lfs under test."""
    if request.param == "system":
        assert shutil.which("git-lfs"), "git-lfs is missing: install/test.sh installs it"
        return ""
    binary = LFS_361 / "git-lfs"
    assert binary.exists(), f"git-lfs 3.6.1 is missing at {binary}: run `bash install/peers.sh` (install/test.sh runs it)"
    return str(LFS_361) + os.pathsep


def teammate(root: Path, srv: RunningServer, lfs_path: str, *, agent: bool, scope: str = "write") -> GitEnv:
    """A teammate's machine: git-lfs installed, our agent registered or not, a token for REPO
    in a credential helper (what `git credential approve` would store)."""
    g = make_git_env(root)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    g.git("lfs", "install", "--skip-repo")
    if agent:
        g.git_xet("install")
    token = srv.token(scope, repo=REPO)
    g.git("config", "--global", "credential.helper", f"!f() {{ echo username=user; echo password={token}; }}; f")
    return g


def requests(srv: RunningServer) -> list[dict]:
    """The server's access log: one dict per request (method, path, status, bytes)."""
    return [json.loads(line.split(" ", 3)[-1]) for line in srv.log().splitlines() if '"path": ' in line]


def count(srv: RunningServer, method: str, fragment: str) -> int:
    """Requests of `method` whose path has `fragment`, answered 2xx."""
    return sum(r["method"] == method and fragment in r["path"] and 200 <= r["status"] < 300 for r in requests(srv))


def stored_bytes(srv: RunningServer) -> int:
    return sum(stored_objects(srv.data_dir).values())


def test_plain_clone_push_pull_for_agent_and_stock_teammates(tmp_path: Path, lfs_path: str) -> None:
    remote = tmp_path / "remote.git"
    with running_server(tmp_path / "srv" / "data") as srv:
        alice = teammate(tmp_path / "alice", srv, lfs_path, agent=True)
        bob = teammate(tmp_path / "bob", srv, lfs_path, agent=False)
        v1 = random_bytes(9_000_000, 45)
        work = alice.lfs_work_tree({"model.bin": v1}, remote=remote)
        alice.git_xet("setup-repo", f"{srv.url}/{REPO}", cwd=work)
        alice.git("commit", "-qm", "LFS objects live on our server", cwd=work)
        alice.git("push", "-q", "origin", "main", cwd=work)
        assert count(srv, "POST", "/v1/xorbs") >= 1, "the agent's push was not XET"
        assert count(srv, "PUT", "/info/lfs/basic/") == 0

        # Bob: a plain clone with stock git-lfs gets the file through the bridge.
        bob.git("clone", "-q", str(remote), "bob-work")
        bob_work = bob.root / "bob-work"
        assert (bob_work / "model.bin").read_bytes() == v1
        assert count(srv, "GET", "/xet-bridge-us/") == 1

        # Bob edits and pushes: a basic PUT, stored as XET, deduplicated against Alice's push.
        before = stored_bytes(srv)
        v2 = bytearray(v1)
        v2[4_000_000:4_000_100] = b"b" * 100
        (bob_work / "model.bin").write_bytes(bytes(v2))
        bob.git("commit", "-qam", "bob's edit", cwd=bob_work)
        bob.git("push", "-q", "origin", "main", cwd=bob_work)
        assert count(srv, "PUT", f"/{REPO}.git/info/lfs/basic/") == 1
        assert stored_bytes(srv) - before < len(v2) // 10, "Bob's basic upload was not deduplicated against Alice's"

        # Alice pulls Bob's version natively (a XET reconstruction, not the bridge).
        reconstructions = count(srv, "GET", "/v2/reconstructions/")
        alice.git("pull", "-q", cwd=work)
        assert (work / "model.bin").read_bytes() == bytes(v2)
        assert count(srv, "GET", "/xet-bridge-us/") == 1
        assert count(srv, "GET", "/v2/reconstructions/") == reconstructions + 1

        # Alice edits again: her agent's push dedups against Bob's basic upload.
        before = stored_bytes(srv)
        v3 = bytearray(v2)
        v3[7_000_000:7_000_100] = b"a" * 100
        (work / "model.bin").write_bytes(bytes(v3))
        alice.git("commit", "-qam", "alice's edit", cwd=work)
        alice.git("push", "-q", "origin", "main", cwd=work)
        assert stored_bytes(srv) - before < len(v3) // 10

        # And a plain `git lfs pull` for Bob, every version from a fresh clone for both.
        bob.git("pull", "-q", cwd=bob_work)
        assert (bob_work / "model.bin").read_bytes() == bytes(v3)
        for who, g in (("a2", alice), ("b2", bob)):
            g.git("clone", "-q", str(remote), who)
            for rev, data in (("HEAD", v3), ("HEAD~1", v2), ("HEAD~2", v1)):
                g.git("checkout", "-q", rev, cwd=g.root / who)
                assert (g.root / who / "model.bin").read_bytes() == bytes(data), (who, rev)
            assert "Git LFS fsck OK" in g.git("lfs", "fsck", cwd=g.root / who).stdout


def test_install_writes_the_keys_newer_git_lfs_reads_and_doctor_checks_them(tmp_path: Path, lfs_path: str) -> None:
    """git-lfs 3.7+ reads `lfs.customtransfer.xet.*` in lowercase only and uses an agent only for
    the operations it is registered for: install writes exactly those keys, doctor flags others."""
    g = make_git_env(tmp_path)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    g.git_xet("install")
    config = (g.root / "home" / ".gitconfig").read_text()
    assert '[lfs "customtransfer.xet"]' in config and "direction = both" in config and "concurrent = true" in config
    assert g.git_xet("doctor", check=False).returncode == 0
    g.git("config", "--global", "lfs.customTransfer.xet.args", "transfer")  # a hand edit in another case
    g.git("config", "--global", "lfs.customtransfer.xet.direction", "upload")
    flagged = g.git_xet("doctor", check=False)
    assert flagged.returncode == 1
    assert "lfs.customTransfer.xet.args is not read by git-lfs 3.7" in flagged.stdout
    assert "git-lfs uses the agent only to upload" in flagged.stdout
    g.git("config", "--global", "--unset-all", "lfs.customTransfer.xet.args")
    g.git("config", "--global", "--unset-all", "lfs.customtransfer.xet.direction")
    g.git_xet("install")
    assert g.git_xet("doctor", check=False).returncode == 0
    g.git_xet("uninstall")
    assert "customtransfer" not in (g.root / "home" / ".gitconfig").read_text()


def test_prune_verifies_against_the_endpoint_for_stock_git_lfs(tmp_path: Path, lfs_path: str) -> None:
    """With stock git-lfs, git-lfs asks the endpoint itself: an object pushed without its LFS
    content is "missing on remote" and kept; once pushed (a basic PUT), prune verifies and deletes it."""
    from tests.integration.test_prune_verify import _object_file, _on_a_terminal, _unpushed_then_replaced

    with running_server(tmp_path / "srv" / "data") as srv:
        g = teammate(tmp_path / "bob", srv, lfs_path, agent=False)
        g.git("config", "--global", "lfs.url", f"{srv.url}/{REPO}.git/info/lfs")
        work, v1 = _unpushed_then_replaced(g, seed=46)
        kept = _object_file(work, v1)
        prune = _on_a_terminal(g, "git lfs prune --verify-remote", work)
        assert prune.returncode != 0 and "missing on remote" in prune.stdout, prune.stdout
        assert kept.exists()
        g.git("lfs", "push", "--all", "origin", cwd=work)
        assert count(srv, "PUT", "/info/lfs/basic/") >= 1
        assert "verified with remote" in g.git("lfs", "prune", "--verify-remote", cwd=work).stdout
        assert not kept.exists()
