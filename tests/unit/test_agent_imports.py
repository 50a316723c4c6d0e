"""What an agent imports before its first object: git-lfs starts eight per command, so each
module an agent does not need is paid eight times. An agent of a push never downloads, one of
a clone never uploads; neither needs ctypes.util (which imports subprocess, tempfile, shutil)
unless glibc's soname fails to load."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from git_xet.client.location import create_local_store


def _loaded_after(setup: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of `candidates` a fresh interpreter has imported once it ran `setup`."""
    script = f"import sys, json\n{setup}\nprint(json.dumps(sorted(m for m in {candidates!r} if m in sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


def test_an_agent_session_loads_neither_pipeline_until_an_object_needs_it() -> None:
    setup = "from git_xet.agent.session import AgentSession\nAgentSession(None)"
    assert _loaded_after(setup, ("git_xet.pipelines.download", "git_xet.pipelines.upload", "ctypes.util", "httpx")) == []


def test_the_upload_path_imports_no_module_it_has_replaced() -> None:
    """uuid (with platform) and difflib cost ~3-5 ms per agent; what used them does without.
    dataclasses imports inspect (~15 ms), and defining a frozen dataclass costs ~1 ms (each of
    its generated methods is compiled): the agent's record types are NamedTuples or plain
    classes instead (~0.2 ms)."""
    setup = "import git_xet.agent.session, git_xet.agent.routing, git_xet.client.http_backend, git_xet.client.local_backend, git_xet.pipelines.upload"
    assert _loaded_after(setup, ("uuid", "platform", "difflib", "dataclasses", "git_xet.pipelines.download")) == []


def test_the_download_path_into_a_local_store_defines_no_dataclass() -> None:
    setup = "import git_xet.agent.session, git_xet.agent.routing, git_xet.client.local_backend, git_xet.pipelines.download"
    assert _loaded_after(setup, ("dataclasses", "inspect", "git_xet.pipelines.upload")) == []


_RUN_AGENT = """
import io, json, sys
from git_xet.agent import transfer
transfer.run(io.StringIO(sys.stdin.read()))
sys.stderr.write(json.dumps(sorted(m for m in ("dataclasses", "inspect") if m in sys.modules)))
"""


def test_agents_that_upload_and_download_through_a_local_store_define_no_dataclass(tmp_path: Path) -> None:
    """The whole of what an agent runs for an object, not a list of modules to import."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data = b"no dataclasses" * 1000
    oid = hashlib.sha256(data).hexdigest()
    stored = tmp_path / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid
    stored.parent.mkdir(parents=True)
    stored.write_bytes(data)
    create_local_store(tmp_path / "store")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_XET_CACHE": str(tmp_path / "cache"), "GIT_XET_ENDPOINT": str(tmp_path / "store")}

    def agent(operation: str, request: dict) -> tuple[dict, list[str]]:
        init = {"event": "init", "operation": operation, "remote": "origin", "concurrent": True, "concurrenttransfers": 8}
        lines = "".join(json.dumps(m) + "\n" for m in (init, request, {"event": "terminate"}))
        proc = subprocess.run([sys.executable, "-c", _RUN_AGENT], input=lines, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=True)
        complete = json.loads(proc.stdout.splitlines()[-1])
        assert complete["event"] == "complete" and "error" not in complete, complete
        return complete, json.loads(proc.stderr.splitlines()[-1])

    _, loaded = agent("upload", {"event": "upload", "oid": oid, "size": len(data), "path": str(stored)})
    assert loaded == []
    complete, loaded = agent("download", {"event": "download", "oid": oid, "size": len(data)})
    assert Path(complete["path"]).read_bytes() == data
    assert loaded == []
