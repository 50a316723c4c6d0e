"""What the fork server imports once for all of a command's agents (agent/session.prepare): for
a store reached over HTTP, the HTTP stack (httpx, httpcore, ssl: ~0.1-0.2 CPU-s per import),
which each worker forked from it would otherwise import again with its first object (eight
times per clone); for a local-directory store, none of it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from git_xet.client.location import create_local_store
from tests.support.agent_runs import local_store_env

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
