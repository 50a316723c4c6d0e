"""What `git xet transfer` has imported of git-xet when it answers `init`: git-lfs starts eight
agents per command and sends none of them an object before all have answered, so every module
on this path is paid eight times before anything moves. The list is pinned: a module that joins
it joins on purpose (and this test says what it costs to think about).

Since XetError moved to core/errors.py, core/ and core/errors.py are on it (they import nothing;
an agent given an object loaded both anyway). launch.sh, which `git xet install` registers,
answers `init` before Python starts at all (tests/integration/test_agent_protocol.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import json, sys
import git_xet.cli  # what `git xet transfer` runs through (cli.main hands over before argparse)
from git_xet.agent import transfer

seen = []

def lines():
    yield json.dumps({"event": "init", "operation": sys.argv[1], "remote": "origin", "concurrent": True, "concurrenttransfers": 8}) + "\\n"
    seen.append(sorted(m for m in sys.modules if m == "git_xet" or m.startswith("git_xet.")))  # init is answered by now
    yield '{"event": "terminate"}\\n'

transfer.run(lines())
sys.stderr.write("\\nLOADED " + json.dumps(seen[0]))
"""

BEFORE_INIT = [
    "git_xet",
    "git_xet.agent",
    "git_xet.agent.progress",
    "git_xet.agent.protocol",
    "git_xet.agent.stdio",
    "git_xet.agent.transfer",
    "git_xet.cli",
    "git_xet.core",
    "git_xet.core.errors",
]


def test_an_uploading_agent_answers_init_having_imported_only_these(tmp_path: Path) -> None:
    """(A download's init also asks whether git-lfs is pruning: prune_guard.py, by design.)"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_XET_LAUNCHED")}
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, "upload"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "{}"  # init answered without an error
    assert json.loads(proc.stderr.rsplit("\nLOADED ", 1)[1]) == BEFORE_INIT
