"""The troubleshooting page's portable push, as written: with every accelerator off and no C
extension, a push through a directory store works, a clone gets the bytes back, and doctor says
which chunker it ran. (That no fork server serves then: test_agent_fork_server.py.)"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.datagen import random_bytes
from tests.support.docs_blocks import run_block
from tests.support.gitenv import make_git_env


def test_a_push_with_accelerators_and_c_extensions_off(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.git_xet("install", "--standalone", str(tmp_path / "store"))
    g.git("init", "-q", "--bare", str(tmp_path / "remote.git"))
    repo = tmp_path / "repo"
    g.git("clone", "-q", str(tmp_path / "remote.git"), str(repo))
    g.git("lfs", "track", "*.bin", cwd=repo)
    files = {f"f{k}.bin": random_bytes(200_000 + k, k) for k in range(12)}  # more than one agent's worth
    for name, data in files.items():
        (repo / name).write_bytes(data)
    g.git("add", ".", cwd=repo)
    g.git("commit", "-qm", "files", cwd=repo)
    done = run_block("troubleshooting.md", "portable-push", cwd=repo, env=g.env, timeout=600)
    assert "pure-Python chunker (GIT_XET_NO_NATIVE is set" in done.stdout
    g.git("clone", "-q", str(tmp_path / "remote.git"), str(tmp_path / "copy"))
    for name, data in files.items():
        assert (tmp_path / "copy" / name).read_bytes() == data
    pointer = subprocess.run(["git", "show", "HEAD:f0.bin"], cwd=tmp_path / "copy", env=g.env, capture_output=True, text=True, check=True)
    assert pointer.stdout.startswith("version https://git-lfs.github.com/spec/v1")
