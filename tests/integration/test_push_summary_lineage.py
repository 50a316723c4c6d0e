"""The push summary's id on a system without /proc (macOS, the BSDs): every agent of one
git-lfs process must find the same id, or each reports a push of its own (one summary line
per agent, and `git xet stats` counting one agent's files).

Run here with the platform module told it is on macOS: it then asks the real `ps`, as it does
there. The process tree is the real shape: a process named git-lfs (a copy of the shell), and
each agent under its own `sh -c`."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

AGENT = """
import sys, types
import git_xet.platform.processes as processes
processes.sys = types.SimpleNamespace(platform="darwin")  # no /proc: ask ps, as on macOS
from pathlib import Path
from git_xet.agent.summary import PushSummary
print(PushSummary(Path(sys.argv[1])).push)
"""


def test_agents_of_one_git_lfs_process_share_one_push_id_without_proc(tmp_path: Path) -> None:
    lfs = tmp_path / "git-lfs"
    shutil.copy("/bin/sh", lfs)  # named like git-lfs, as `ps` shows it
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    run_agent = f"sh -c '{sys.executable} {agent} {tmp_path}'"
    out = subprocess.run([str(lfs), "-c", f"{run_agent}; {run_agent}; {run_agent}"], capture_output=True, text=True, timeout=120, check=True).stdout
    ids = out.splitlines()
    assert len(ids) == 3, out
    assert len(set(ids)) == 1, ids  # one push
    pid = ids[0].split("-", 1)[0]
    assert subprocess.run(["ps", "-o", "comm=", "-p", pid], capture_output=True, text=True, check=False).stdout.strip() in ("", "git-lfs")
