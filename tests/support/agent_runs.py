"""Running the transfer agent's main loop in a fresh interpreter, with a script around it that
reports on the process afterwards (what it imported, its collector's state): the parts of an
agent's behaviour that only show inside its own process."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path


def put_lfs_object(repo: Path, data: bytes) -> tuple[str, Path]:
    """Put `data` where git-lfs keeps objects (.git/lfs/objects/ab/cd/<oid>); (oid, path)."""
    oid = hashlib.sha256(data).hexdigest()
    path = repo / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return oid, path


def local_store_env(tmp_path: Path, store: Path) -> dict[str, str]:
    """An agent's environment for a standalone local store, isolated from the user's."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_XET_CACHE": str(tmp_path / "cache"), "GIT_XET_ENDPOINT": str(store)}


def run_agent_script(script: str, operation: str, requests: list[dict], *, env: dict[str, str], cwd: Path) -> tuple[list[dict], object]:
    """Run `script` (which calls git_xet.agent.transfer.run on stdin, then writes one JSON
    value as the last line of stderr) on init, `requests` and terminate; returns the agent's
    answers and that value."""
    init = {"event": "init", "operation": operation, "remote": "origin", "concurrent": True, "concurrenttransfers": 8}
    lines = "".join(json.dumps(m) + "\n" for m in (init, *requests, {"event": "terminate"}))
    proc = subprocess.run([sys.executable, "-c", script], input=lines, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines()], json.loads(proc.stderr.splitlines()[-1])
