"""Per-repository quotas (issue 46 §2): real git pushes through the agent to the real server, on
both index kinds, with generated file sizes around the limit.

What counts is the repository's logical bytes (the sizes of the files it holds, each once): a
push whose files would take it past its quota is refused, git's stderr names the quota and the
usage, and what the repository holds never exceeds it. Each shard is registered all or nothing:
a refused one adds no file to the repository (files of earlier shards of the same push that fit
stay, complete)."""

from __future__ import annotations

import itertools
import secrets
from pathlib import Path

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env, run_git_xet
from tests.support.server_process import RunningServer, running_server

ADMIN = secrets.token_hex(16)


def _admin(server: RunningServer, path: str, body: dict | None = None) -> dict:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    answer = httpx.post(server.url + path, json=body, headers=headers, timeout=60) if body is not None else httpx.get(server.url + path, headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _held(server: RunningServer, repo: str) -> tuple[int, int]:
    """(files, logical bytes) the repository holds, from the admin API."""
    rows = _admin(server, f"/admin/api/usage?repo={repo}")["repos"]
    return (rows[0]["files"], rows[0]["logical_bytes"]) if rows else (0, 0)


def _pusher(root: Path, server: RunningServer, repo: str) -> GitEnv:
    """A user with the agent installed and a write token for `repo` in a credential helper."""
    g = make_git_env(root)
    g.git("lfs", "install", "--skip-repo")
    g.git_xet("install")
    token = server.token("write", repo=repo)
    g.use_credentials(token)
    return g


def _push(g: GitEnv, server: RunningServer, repo: str, files: dict[str, bytes], work: str) -> tuple[bool, str]:
    tree = g.lfs_work_tree(files, work=work, remote=f"{work}.git")
    g.git("config", "lfs.url", f"{server.url}/{repo}.git/info/lfs", cwd=tree)
    pushed = g.git("push", "-q", "origin", "main", cwd=tree, check=False)
    return pushed.returncode == 0, pushed.stderr


def test_pushes_around_the_quota(tmp_path: Path, index_args: list[str]) -> None:
    with running_server(tmp_path / "data", *index_args, env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        g = _pusher(tmp_path / "user", server, "quota/*")
        counter = iter(range(1_000))
        outcomes: list[bool] = []

        @settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(sizes=st.lists(st.integers(1, 400_000), min_size=1, max_size=4), slack=st.integers(-300_000, 300_000))
        def push_one(sizes: list[int], slack: int) -> None:
            n = next(counter)
            repo = f"quota/r{n}"
            files = {f"f{i}.bin": random_bytes(size, 1000 * n + i) for i, size in enumerate(sizes)}
            total = sum(sizes)
            quota = max(0, total + slack)
            assert _admin(server, "/admin/api/repos/quota", {"repo": repo, "max_bytes": quota}) == {"repo": repo, "max_bytes": quota, "logical_bytes": 0}
            ok, stderr = _push(g, server, repo, files, f"w{n}")
            held_files, held_bytes = _held(server, repo)
            outcomes.append(ok)
            assert held_bytes <= quota, "a repository holds more than its quota"
            if total <= quota:
                assert ok, stderr
                assert (held_files, held_bytes) == (len(files), total)
            else:
                assert not ok, f"a push of {total} bytes into a quota of {quota} succeeded"
                assert "over its quota" in stderr and f"{quota} bytes" in stderr, stderr
                assert "logical bytes" in stderr and "ask the operator to raise the quota" in stderr, stderr
                # Whatever it holds is whole files of this push (shards are all or nothing).
                subsets = {(len(c), sum(c)) for k in range(len(sizes) + 1) for c in itertools.combinations(sizes, k)}
                assert (held_files, held_bytes) in subsets

        push_one()
        assert True in outcomes and False in outcomes, f"the examples did not cover both sides of the limit: {outcomes}"


def test_the_quota_command_and_a_raise_after_a_refusal(tmp_path: Path, index_args: list[str]) -> None:
    """`git xet repo quota` sets and shows it; after a refusal, raising it lets the same push
    through (nothing the refused push sent blocks it)."""
    data = tmp_path / "data"
    flags = ["--data", str(data), *index_args]
    with running_server(data, *index_args, env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        g = _pusher(tmp_path / "user", server, "team/q")
        shown = run_git_xet("repo", "quota", "team/q", "100K", *flags, timeout=120, check=True)
        assert "quota 102400 bytes, 0 logical bytes held" in shown.stdout
        files = {"a.bin": random_bytes(80_000, 1), "b.bin": random_bytes(60_000, 2)}
        ok, stderr = _push(g, server, "team/q", files, "w")
        assert not ok and "over its quota" in stderr
        run_git_xet("repo", "quota", "team/q", "1M", *flags, timeout=120, check=True)
        tree = g.root / "w"
        assert g.git("push", "-q", "origin", "main", cwd=tree, check=False).returncode == 0
        assert _held(server, "team/q") == (2, 140_000)
        shown = run_git_xet("repo", "quota", "team/q", *flags, timeout=120, check=True)
        assert "quota 1048576 bytes, 140000 logical bytes held" in shown.stdout
        run_git_xet("repo", "quota", "team/q", "none", *flags, timeout=120, check=True)
        assert "no quota" in run_git_xet("repo", "quota", "team/q", *flags, timeout=120, check=True).stdout


def test_a_stock_git_lfs_push_past_the_quota_is_refused_with_the_reason(tmp_path: Path) -> None:
    """A teammate with stock git-lfs (basic PUTs, stored as XET by the server) meets the same
    quota, and git's stderr gives the same reason; the repository holds nothing. An object that
    cannot fit is refused in the batch answer: a refused PUT (507) git-lfs retries with backoff,
    36 s here before it gave up."""
    with running_server(tmp_path / "data", env={"GIT_XET_ADMIN_TOKEN": ADMIN}) as server:
        g = make_git_env(tmp_path / "stock")
        g.git("lfs", "install", "--skip-repo")
        token = server.token("write", repo="team/stock")
        g.use_credentials(token)
        _admin(server, "/admin/api/repos/quota", {"repo": "team/stock", "max_bytes": 50_000})
        ok, stderr = _push(g, server, "team/stock", {"big.bin": random_bytes(60_000, 9)}, "w")
        assert not ok and "over its quota" in stderr and "51200" not in stderr and "50000 bytes" in stderr, stderr
        assert _held(server, "team/stock") == (0, 0)
        # Refused in the batch answer, once: no PUT that git-lfs would retry for half a minute.
        assert not [r for r in server.requests() if r["method"] == "PUT"]
