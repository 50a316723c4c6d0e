"""The agent's cyclic garbage collector: off while start-up creates the objects that live as
long as the process, then those are frozen and collection resumes, whether the first object
succeeded or failed (an agent whose uploads all fail must not pile up garbage cycles)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from git_xet.client.location import create_local_store
from tests.support.agent_runs import local_store_env, put_lfs_object, run_agent_script

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
    oid, path = put_lfs_object(tmp_path, data)
    if first_object == "missing":
        path.unlink()
    create_local_store(tmp_path / "store")
    request = {"event": "upload", "oid": oid, "size": len(data), "path": str(path)}
    answers, state = run_agent_script(_RUN_AGENT, "upload", [request], env=local_store_env(tmp_path, tmp_path / "store"), cwd=tmp_path)
    assert answers[-1]["event"] == "complete" and ("error" in answers[-1]) == (first_object == "missing"), answers
    assert isinstance(state, dict) and state["enabled"] is True
    assert state["frozen"] > 10_000  # the modules' objects, frozen when collection resumed
