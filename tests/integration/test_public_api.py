"""The public Python API: `import git_xet` stays cheap, and the library example of docs/api.md runs
as written against a directory store and against a real `git xet serve`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from git_xet.client.location import create_local_store
from tests.support import hf_xet_oracle
from tests.support.datagen import random_bytes
from tests.support.server_process import running_server

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "api.md"
EXAMPLE_STORE = "/shared/xet-store"  # the location the example names


def _readme_example() -> str:
    """The first Python block of the API page."""
    text = API_PAGE.read_text(encoding="utf-8")
    match = re.search(r"```python\n(.*?)```", text, re.S)
    assert match, "docs/api.md has no python example"
    return match.group(1)


def _python(code: str, cwd: Path, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GIT_XET_TOKEN", "GIT_XET_ENDPOINT")}
    env.update(env_extra or {})
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_import_is_lazy() -> None:
    """`import git_xet` loads none of the API's dependencies; the first use of a name does."""
    code = (
        "import sys, json, git_xet\n"
        "before = sorted(m for m in sys.modules if m.startswith(('git_xet.', 'httpx', 'blake3', 'starlette')))\n"
        "git_xet.hash_file\n"
        "after = 'git_xet.pipelines.file_hashing' in sys.modules\n"
        "print(json.dumps({'before': before, 'after': after, 'all': sorted(git_xet.__all__)}))\n"
    )
    seen = json.loads(_python(code, Path.cwd()).stdout)
    assert seen["before"] == []
    assert seen["after"] is True
    import git_xet

    assert set(seen["all"]) == {"__version__", "XetError", *git_xet._LAZY}

    for name in seen["all"]:  # every advertised name resolves
        assert getattr(git_xet, name) is not None
    with pytest.raises(AttributeError):
        git_xet.no_such_name  # noqa: B018


def _run_example(tmp_path: Path, location: str, env_extra: dict[str, str] | None = None) -> tuple[bytes, dict[str, str]]:
    work = tmp_path / "work"
    work.mkdir()
    data = random_bytes(3_000_000, 77)
    (work / "model.safetensors").write_bytes(data)
    code = _readme_example()
    assert EXAMPLE_STORE in code
    proc = _python(code.replace(EXAMPLE_STORE, location), work, {"GIT_XET_CACHE": str(tmp_path / "cache"), **(env_extra or {})})
    file_hex, sha256_hex, size, new_bytes = proc.stdout.split()
    assert (work / "copy.safetensors").read_bytes() == data
    # Against what others compute: sha256 by hashlib, the XET file hash by hf-xet.
    assert sha256_hex == hashlib.sha256(data).hexdigest()
    assert [file_hex] == hf_xet_oracle.hash_files([work / "model.safetensors"], tmp_path)
    assert int(size) == len(data) and 0 < int(new_bytes) <= len(data)
    return data, {"file_hex": file_hex, "sha256_hex": sha256_hex}


def test_readme_example_against_a_directory_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    create_local_store(store)
    _, uploaded = _run_example(tmp_path, str(store))
    from git_xet.storage.cas_store import CasStore

    held = CasStore(store)
    try:
        found = held.file_by_sha256(uploaded["sha256_hex"])
        assert found is not None and found.file_hex == uploaded["file_hex"]
    finally:
        held.close()


def test_readme_example_against_git_xet_serve(tmp_path: Path) -> None:
    with running_server(tmp_path / "server") as server:
        data, uploaded = _run_example(tmp_path, server.url, {"GIT_XET_TOKEN": server.token("write")})
        # hf-xet downloads what the example uploaded: the server holds the file it reported.
        out = tmp_path / "by-hf-xet.bin"
        hf_xet_oracle.remote_download([(out, uploaded["file_hex"], len(data))], server.url, server.token("read"), tmp_path)
        assert out.read_bytes() == data


def test_an_unknown_location_says_what_to_write(tmp_path: Path) -> None:
    import git_xet

    with pytest.raises(git_xet.LocationError, match="https://"):
        git_xet.open_store("xet.example.com:8080")
    with pytest.raises(git_xet.LocationError, match="create=True"):
        git_xet.open_store(str(tmp_path / "nothing-here"))
    assert isinstance(git_xet.LocationError("x"), git_xet.XetError)


def test_the_store_handle_closes_its_http_client(tmp_path: Path) -> None:
    import git_xet

    with git_xet.open_store("http://127.0.0.1:9") as store:  # nothing is sent before a call
        http = store.backend.http  # type: ignore[attr-defined]
        assert not http.is_closed
    assert http.is_closed
