"""What an agent imports before its first object: git-lfs starts eight per command, so each
module an agent does not need is paid eight times. An agent of a push never downloads, one of
a clone never uploads; neither needs ctypes.util (which imports subprocess, tempfile, shutil)
unless glibc's soname fails to load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from git_xet.client.location import create_local_store
from tests.support.agent_runs import local_store_env, put_lfs_object, run_agent_script


def _loaded_after(setup: str, candidates: tuple[str, ...]) -> list[str]:
    """Which of `candidates` a fresh interpreter has imported once it ran `setup`."""
    script = f"import sys, json\n{setup}\nprint(json.dumps(sorted(m for m in {candidates!r} if m in sys.modules)))\n"
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    return json.loads(proc.stdout)


# The HTTP stack (httpx, httpcore beneath it, ssl beneath both): ~0.1-0.2 CPU-s per process,
# paid only by an agent that makes a request (or once by the command's fork server).
HTTP_STACK = ("httpx", "httpcore", "h11", "ssl", "git_xet.client.http_client")


def test_an_agent_session_loads_neither_pipeline_until_an_object_needs_it() -> None:
    setup = "from git_xet.agent.session import AgentSession\nAgentSession(None)"
    assert _loaded_after(setup, ("git_xet.pipelines.download", "git_xet.pipelines.upload", "ctypes.util", *HTTP_STACK)) == []


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


_RUN_AGENT = f"""
import io, json, sys
from git_xet.agent import transfer
transfer.run(io.StringIO(sys.stdin.read()))
sys.stderr.write(json.dumps(sorted(m for m in {("dataclasses", "inspect", *HTTP_STACK)!r} if m in sys.modules)))
"""


def test_agents_that_upload_and_download_through_a_local_store_define_no_dataclass(tmp_path: Path) -> None:
    """The whole of what an agent runs for an object, not a list of modules to import; nor
    does such an agent load the HTTP stack."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data = b"no dataclasses" * 1000
    oid, stored = put_lfs_object(tmp_path, data)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    upload = {"event": "upload", "oid": oid, "size": len(data), "path": str(stored)}
    answers, loaded = run_agent_script(_RUN_AGENT, "upload", [upload], env=env, cwd=tmp_path)
    assert answers[-1]["event"] == "complete" and "error" not in answers[-1], answers
    assert loaded == []
    download = {"event": "download", "oid": oid, "size": len(data)}
    answers, loaded = run_agent_script(_RUN_AGENT, "download", [download], env=env, cwd=tmp_path)
    assert answers[-1]["event"] == "complete" and Path(answers[-1]["path"]).read_bytes() == data, answers
    assert loaded == []
