"""`git lfs prune --verify-remote` never deletes the only copy of an object (git-xet issue 41).

Real git, git-lfs (the system's 3.3.0 and 3.6.1 from install/peers.sh) and our server on
127.0.0.1, in the four ways the agent is used: a directory store, `--standalone` toward our
server, `--native` toward our server as the Hub, and Hub mode (git-lfs makes the batch call).
A commit is pushed without its LFS object (GIT_LFS_SKIP_PUSH=1), then replaced: prune would
delete the object, which no store holds. In the standalone modes git-lfs answers the batch itself
and used to count it "verified with remote" and delete it.
"""

from __future__ import annotations

import contextlib
import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.server_process import running_server

MODES = ["directory", "server", "native", "hub"]
OUR_MESSAGE = "not in the XET store"


@contextlib.contextmanager
def _installed(g: GitEnv, mode: str, tmp: Path) -> Iterator[None]:
    """`git xet install` for `mode` (a server on 127.0.0.1 for all but the directory store)."""
    if mode == "directory":
        g.git_xet("install", "--standalone", str(tmp / "xet-store"))
        yield
        return
    with running_server(tmp / "srv" / "data") as srv:
        if mode == "server":
            g.git_xet("install", "--standalone", srv.url)
            g.git("config", "--global", "xet.token", srv.token("write"))
        else:
            user_token = srv.token("write", repo="acme/model")
            g.git_xet("install", *(["--native", srv.url] if mode == "native" else []))
            g.use_credentials(user_token)
            g.git("config", "--global", "lfs.url", f"{srv.url}/acme/model.git/info/lfs")
        yield


def _object_file(work: Path, data: bytes) -> Path:
    oid = hashlib.sha256(data).hexdigest()
    return work / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid


def _unpushed_then_replaced(g: GitEnv, seed: int) -> tuple[Path, bytes]:
    """A work tree whose first version of a.bin was pushed without its LFS object, then replaced
    by a second, pushed with it: the first is what prune deletes. Returns (work tree, v1)."""
    v1, v2 = random_bytes(40_000, seed), random_bytes(30_000, seed + 1)
    work = g.lfs_work_tree({"a.bin": v1})
    g.env["GIT_LFS_SKIP_PUSH"] = "1"
    g.git("push", "-q", "origin", "main", cwd=work)
    del g.env["GIT_LFS_SKIP_PUSH"]
    (work / "a.bin").write_bytes(v2)
    g.git("commit", "-qam", "v2", cwd=work)
    g.git("push", "-q", "origin", "main", cwd=work)
    for key in ("lfs.fetchrecentrefsdays", "lfs.fetchrecentcommitsdays", "lfs.pruneoffsetdays"):
        g.git("config", key, "0", cwd=work)  # v1 is old enough to prune at once
    return work, v1


def _on_a_terminal(g: GitEnv, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`command` with a terminal (util-linux `script`): what the agent shows there is seen."""
    env = {k: v for k, v in g.env.items() if k != "GIT_XET_QUIET"}
    return subprocess.run(["script", "-qec", command, "/dev/null"], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("mode", MODES)
def test_prune_keeps_an_object_the_store_lacks_and_deletes_it_once_pushed(tmp_path: Path, mode: str, lfs_path: str) -> None:
    g = make_git_env(tmp_path)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    with _installed(g, mode, tmp_path):
        work, v1 = _unpushed_then_replaced(g, seed=41)
        kept = _object_file(work, v1)
        assert kept.exists()

        prune = _on_a_terminal(g, "git lfs prune --verify-remote", work)
        assert prune.returncode != 0, prune.stdout
        assert "missing on remote" in prune.stdout
        assert kept.exists()
        if mode != "hub":  # (there git-lfs asks the server itself, and refuses on its own)
            assert OUR_MESSAGE in prune.stdout and "git lfs push --all origin" in prune.stdout
            assert OUR_MESSAGE in g.agent_log()

        # fetch --prune verifies when lfs.pruneverifyremotealways says so: the same refusal.
        fetch = g.git("-c", "lfs.pruneverifyremotealways=true", "lfs", "fetch", "--prune", cwd=work, check=False)
        assert fetch.returncode != 0, fetch.stdout + fetch.stderr
        assert kept.exists()

        # The fix the message names: `git lfs push --all` gives the agent the object, which
        # checks the store itself and uploads it; then prune verifies it and deletes it.
        g.git("lfs", "push", "--all", "origin", cwd=work)
        pruned = g.git("lfs", "prune", "--verify-remote", cwd=work)
        assert "verified with remote" in pruned.stdout
        assert not kept.exists()
        g.git("clone", "-q", "remote.git", "again")  # and the store serves what was pruned here
        g.git("checkout", "-q", "HEAD~1", cwd=g.root / "again")
        assert (g.root / "again" / "a.bin").read_bytes() == v1

