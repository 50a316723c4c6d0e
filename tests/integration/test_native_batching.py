"""`--native` pushes and clones ask the LFS batch API a hundred objects at a time, not once per
object (issue 41 §4).

Real git and git-lfs (3.3.0 and 3.6.1) clone a commit of generated LFS files through our agent
in `install --native` mode, our server on 127.0.0.1 acting as the Hub. git-lfs hands each of
its agents one object at a time; the agent used to make one batch call per object. Now its
first upload or download asks for that object and the next pointers of the checkout
(agent/prefetch.py): every agent asks about each object at most once, so a push or a clone
makes at most agents x (ceil(files / 100) + 1) batch calls, and every file arrives intact.
The same holds beyond HEAD: a push of a branch that is not checked out (with objects only in
its history) and `git lfs fetch` of that branch, whose objects HEAD's pointers do not hold
(on main: one call per object).
"""

from __future__ import annotations

import math
import os
import subprocess
from pathlib import Path

import pytest

from git_xet.agent import prefetch

from tests.support.datagen import random_bytes
from tests.support.gitenv import make_git_env
from tests.support.server_process import RunningServer, running_server

AGENTS = 8  # git-lfs's default lfs.concurrenttransfers, set explicitly below


def _batch_calls(server: RunningServer) -> int:
    return sum(r["path"].endswith("/info/lfs/objects/batch") and r.get("method", "POST") == "POST" for r in server.requests())


@pytest.mark.parametrize("files", [150])
def test_native_clone_batches_downloads(files: int, tmp_path: Path, lfs_path: str) -> None:
    tmp = tmp_path
    g = make_git_env(tmp)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    contents = {f"f{i:04d}.bin": random_bytes(1000 + 37 * i, files * 10_000 + i) for i in range(files)}
    other = {f"o{i:04d}.bin": random_bytes(900 + 41 * i, files * 20_000 + i) for i in range(files)}
    with running_server(tmp / "srv" / "data") as srv:
        user_token = srv.token("write", repo="acme/model")
        g.git_xet("install", "--native", srv.url)
        g.use_credentials(user_token)
        g.git("config", "--global", "lfs.url", f"{srv.url}/acme/model.git/info/lfs")
        g.git("config", "--global", "lfs.concurrenttransfers", str(AGENTS))
        work = g.lfs_work_tree(contents)
        g.git("push", "-q", "origin", "main", cwd=work)
        calls = [srv.log_once_it_has("objects/batch") and _batch_calls(srv)]

        g.git("clone", "-q", "remote.git", "clone")
        for name, data in contents.items():
            assert (g.root / "clone" / name).read_bytes() == data, name
        calls.append(_settled(srv, calls))

        # Beyond HEAD: a branch of two commits (a third of its objects only in the first)
        # pushed while main is checked out, then fetched by name into the clone, whose
        # checkout (main) holds none of its objects.
        g.git("checkout", "-q", "-b", "other", cwd=work)
        for name, data in other.items():
            (work / name).write_bytes(data)
        g.git("add", ".", cwd=work)
        g.git("commit", "-qm", "other", cwd=work)
        rewritten = {name: random_bytes(len(data), files * 30_000 + i) for i, (name, data) in enumerate(list(other.items())[: files // 3])}
        for name, data in rewritten.items():  # their first versions are now in history only
            (work / name).write_bytes(data)
        g.git("commit", "-qam", "other, a third rewritten", cwd=work)
        other.update(rewritten)
        g.git("checkout", "-q", "main", cwd=work)
        g.git("push", "-q", "origin", "other", cwd=work)
        calls.append(_settled(srv, calls))
        clone = g.root / "clone"
        g.git("fetch", "-q", "origin", cwd=clone)
        g.git("lfs", "fetch", "origin", "origin/other", cwd=clone)
        calls.append(_settled(srv, calls))
        g.git("checkout", "-q", "-b", "other", "origin/other", cwd=clone)
        for name, data in other.items():
            assert (clone / name).read_bytes() == data, name
    bound = AGENTS * (math.ceil(files / 100) + 1)
    pushed_other = files + len(rewritten)
    made = dict(zip(["push", "clone", f"push of a branch that is not HEAD ({pushed_other} objects)", "fetch of a branch that is not HEAD"], calls))
    bounds = [bound, bound, AGENTS * (math.ceil(pushed_other / 100) + 1), bound]
    assert all(n <= most for n, most in zip(calls, bounds)), f"batch calls for {files} objects each: {made} (at most {bounds})"


def _settled(server: RunningServer, before: list[int]) -> int:
    """Batch calls since those counted in `before`, once the log holds at least one more."""
    server.log_once_it_has("objects/batch", sum(before) + 1)
    return _batch_calls(server) - sum(before)


def _pointer(n: int) -> tuple[str, int]:
    return f"{n:064x}", 1000 + n


def test_the_guess_widens_to_named_refs_unpushed_work_recent_refs_then_history(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """guessed_trees on a real repository: HEAD's pointers; the tree of the ref git-lfs's
    command line names; what local commits on no remote-tracking branch changed, newest first
    (a pointer since replaced too); remote branches from the most recently committed down,
    MAX_TREES trees in all; last, what history changed (the branches past the bound)."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}

    def git(*args: str, stdin: str = "", when: int = 0) -> str:
        dated = {**env, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "GIT_COMMITTER_DATE": f"{1_700_000_000 + when} +0000"}
        return subprocess.run(["git", *args], cwd=tmp_path, env=dated, input=stdin, capture_output=True, text=True, check=True, timeout=60).stdout.strip()

    def commit(ref: str, pointers: list[tuple[str, int]], when: int, parent: str = "") -> str:
        entries = ""
        for k, (oid, size) in enumerate(pointers):
            blob = git("hash-object", "-w", "--stdin", stdin=f"version https://git-lfs.github.com/spec/v1\noid sha256:{oid}\nsize {size}\n")
            entries += f"100644 blob {blob}\tf{k:03d}.bin\n"
        made = git("commit-tree", git("mktree", stdin=entries), "-m", ref, *(["-p", parent] if parent else []), when=when)
        git("update-ref", ref, made)
        return made

    git("init", "-q", "-b", "main")
    shared = [_pointer(0), _pointer(1)]
    base = commit("refs/heads/main", shared, 0)
    git("update-ref", "refs/remotes/origin/main", base)
    branches = prefetch.MAX_TREES + 4
    for b in range(branches):  # origin/b00 is the most recent, then origin/b01, ...
        commit(f"refs/remotes/origin/b{b:02d}", [*shared, _pointer(100 + b)], branches - b)
    first = commit("refs/heads/work", [*shared, _pointer(900)], -2, base)  # (older than every branch)
    commit("refs/heads/work", [*shared, _pointer(901)], -1, first)  # f002.bin replaced
    monkeypatch.chdir(tmp_path)
    old = branches - 1
    trees = list(prefetch.guessed_trees(lambda: ["git-lfs", "fetch", "origin", f"b{old:02d}"]))
    assert trees[0] == shared
    assert trees[1] == [_pointer(100 + old)]  # the named ref, though the oldest
    assert trees[2] == [_pointer(901), _pointer(900)]  # unpushed work, newest first
    recent = prefetch.MAX_TREES - 2
    assert trees[3 : 3 + recent] == [[_pointer(100 + b)] for b in range(recent)]  # then by date
    assert trees[3 + recent :] == [[_pointer(100 + b) for b in range(recent, old)]]  # history: past the bound
