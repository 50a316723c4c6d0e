"""The clone baseline of bench/git_e2e.py and bench/wan.py (upstream's download design,
bench/ranged_basic_agent.py) is a real `git clone` through git-lfs: git-lfs starts the agent
through its launcher, takes each object it answers with, re-hashes it into .git/lfs/objects and
checks it out, as it does after our agent. Real git, git-lfs and `git xet serve` on 127.0.0.1."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import git_e2e
import ranged_basic_agent
from common import lfs_repo_with

from tests.support.gitenv import make_git_env

MIB = 1 << 20


def test_a_clone_with_the_baseline_agent_goes_through_git_lfs(tmp_path: Path) -> None:
    sources = []
    for name, size in (("small.bin", 1), ("odd.bin", 70_001), ("big.bin", 33 * MIB + 5)):  # big: 2 ranges
        sources.append(tmp_path / name)
        sources[-1].write_bytes(os.urandom(size))
    root = tmp_path / "run"
    genv = make_git_env(root)
    with git_e2e.tool_remote("git-xet", root, genv, None) as (log, _pid, server):
        assert server is not None
        work = lfs_repo_with(genv, root, sources)
        genv.git("push", "-q", "origin", "main", cwd=work)
        token_file = root / "read-token"
        token_file.write_text(server[1])
        clone = root / "clone"
        log.mark()
        env = {**genv.env, "GIT_TRACE": "1"}
        run = subprocess.run(ranged_basic_agent.clone_command(server[0], token_file, root / "remote.git", clone), env=env, capture_output=True, text=True, timeout=300, check=False)
        assert run.returncode == 0, run.stderr[-3000:]
        _received, sent = log.since_mark()
    assert "ranged_basic_agent.sh" in run.stderr and "git-xet transfer" not in run.stderr  # the baseline agent, not ours
    assert sent >= sum(src.stat().st_size for src in sources)  # every object fetched from the server, over the basic URL
    for src in sources:
        assert (clone / src.name).read_bytes() == src.read_bytes()
    fsck = subprocess.run(["git", "lfs", "fsck"], cwd=clone, env=genv.env, capture_output=True, text=True, timeout=120, check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr  # git-lfs holds each object in .git/lfs/objects
    assert not list((clone / ".git" / "lfs" / "tmp").glob("*.ranged-*"))  # git-lfs moved every answered file
