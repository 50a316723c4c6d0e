"""The agent's cyclic garbage collector: off while start-up creates the objects that live as
long as the process, then those are frozen and collection resumes, whether the first object
succeeded or failed (an agent whose uploads all fail must not pile up garbage cycles)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from git_xet.client.location import create_local_store

_RUN_AGENT = """
import gc, io, json, sys
from git_xet.agent import transfer
assert gc.isenabled()
transfer.run(io.StringIO(sys.stdin.read()))
sys.stderr.write(json.dumps({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}))
"""


@pytest.mark.parametrize("first_object", ["stored", "missing"])
def test_collection_resumes_after_the_first_object_with_start_up_frozen(tmp_path: Path, first_object: str) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data = b"collector" * 1000
    oid = hashlib.sha256(data).hexdigest()
    path = tmp_path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    path.parent.mkdir(parents=True)
    if first_object == "stored":
        path.write_bytes(data)
    create_local_store(tmp_path / "store")
    requests = [
        {"event": "init", "operation": "upload", "remote": "origin", "concurrent": True, "concurrenttransfers": 8},
        {"event": "upload", "oid": oid, "size": len(data), "path": str(path)},
        {"event": "terminate"},
    ]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_XET_CACHE": str(tmp_path / "cache"), "GIT_XET_ENDPOINT": str(tmp_path / "store")}
    proc = subprocess.run(
        [sys.executable, "-c", _RUN_AGENT], input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=True
    )
    answer = json.loads(proc.stdout.splitlines()[-1])
    assert answer["event"] == "complete" and ("error" in answer) == (first_object == "missing"), answer
    state = json.loads(proc.stderr.splitlines()[-1])
    assert state["enabled"] is True
    assert state["frozen"] > 10_000  # the modules' objects, frozen when collection resumed
