"""What the fork server imports once for all of a command's agents (agent/session.prepare): for
a store reached over HTTP, the HTTP stack (httpx, httpcore, ssl: ~0.1-0.2 CPU-s per import),
which each worker forked from it would otherwise import again with its first object (eight
times per clone); for a local-directory store, none of it."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import pytest

from git_xet.client.location import create_local_store
from tests.support.agent_runs import local_store_env, put_lfs_object, run_agent_script
from tests.support.server_process import running_server

HTTP_STACK = ("httpx", "httpcore", "ssl", "git_xet.client.http_client", "git_xet.client.http_auth")


def _prepared(operation: str, env: dict[str, str], cwd: Path) -> list[str]:
    """Which of HTTP_STACK a fresh interpreter holds once it ran prepare(operation)."""
    script = (
        "import json, sys\nfrom git_xet.agent.session import prepare\n"
        f"prepare({operation!r})\nprint(json.dumps([m for m in {HTTP_STACK!r} if m in sys.modules]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=True)
    return json.loads(proc.stdout)


@pytest.mark.parametrize("operation", ["upload", "download"])
def test_the_fork_server_imports_the_http_stack_once_for_a_server_store(tmp_path: Path, operation: str) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    env = local_store_env(tmp_path, tmp_path / "unused") | {"GIT_XET_ENDPOINT": "http://127.0.0.1:9", "GIT_XET_TOKEN": "not-used"}
    assert _prepared(operation, env, tmp_path) == list(HTTP_STACK)


@pytest.mark.parametrize("operation", ["upload", "download"])
def test_the_fork_server_of_a_local_store_imports_no_http(tmp_path: Path, operation: str) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    create_local_store(tmp_path / "store")
    assert _prepared(operation, local_store_env(tmp_path, tmp_path / "store"), tmp_path) == []


_FIRST_OBJECT = """
import io, json, sys
from git_xet.agent import transfer
from git_xet.agent.session import prepare
prepared = set()
serve = transfer.serve
def forked(*args):  # where a worker starts: init answered (by the first agent), then prepare (by the fork server)
    prepare({operation!r})
    prepared.update(sys.modules)
    return serve(*args)
transfer.serve = forked
transfer.run(io.StringIO(sys.stdin.read()))
sys.stderr.write(json.dumps(sorted(set(sys.modules) - prepared)))
"""


@pytest.mark.parametrize("store", ["server", "local"])
def test_a_first_object_imports_nothing_the_fork_server_did_not(tmp_path: Path, store: str) -> None:
    """Whatever an agent's first upload and download import, `prepare` imported already: each
    worker forked from the fork server would import it again (eight times per command). Found
    by running the objects, not from a list: a new lazy import on the path fails this."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data = b"imported once" * 1000
    oid, stored = put_lfs_object(tmp_path, data)
    with ExitStack() as stack:
        if store == "server":
            srv = stack.enter_context(running_server(tmp_path / "server"))
            env = local_store_env(tmp_path, tmp_path / "unused") | {"GIT_XET_ENDPOINT": srv.url, "GIT_XET_TOKEN": srv.token("write")}
        else:
            create_local_store(tmp_path / "store")
            env = local_store_env(tmp_path, tmp_path / "store")
        upload = {"event": "upload", "oid": oid, "size": len(data), "path": str(stored)}
        answers, imported = run_agent_script(_FIRST_OBJECT.format(operation="upload"), "upload", [upload], env=env, cwd=tmp_path)
        assert answers[-1]["event"] == "complete" and "error" not in answers[-1], answers
        assert imported == [], " ".join(imported)
        download = {"event": "download", "oid": oid, "size": len(data)}
        answers, imported = run_agent_script(_FIRST_OBJECT.format(operation="download"), "download", [download], env=env, cwd=tmp_path)
        assert answers[-1]["event"] == "complete" and Path(answers[-1]["path"]).read_bytes() == data, answers
        assert imported == [], " ".join(imported)
