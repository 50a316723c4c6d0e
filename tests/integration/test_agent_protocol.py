"""The agent process speaking the custom transfer protocol directly (no git-lfs in between)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.agent import protocol
from git_xet.agent.transfer import LAUNCHER
from git_xet.client.location import create_local_store
from tests.support.agent_runs import put_lfs_object
from tests.support.datagen import random_bytes


def _agent(tmp_path: Path, lines: list[str], env_extra: dict[str, str] | None = None, *, returncode: int = 0, launched: bool = False) -> tuple[list[dict], str, float]:
    """Run the agent on `lines`; `launched`: through launch.sh, as `git xet install` registers it."""
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "GIT_XET_CACHE": str(tmp_path / "cache"), "GIT_CONFIG_NOSYSTEM": "1"}
    env.update(env_extra or {})
    start = time.monotonic()
    proc = subprocess.run(
        [*(["sh", str(LAUNCHER)] if launched else []), sys.executable, "-m", "git_xet", "transfer"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
        check=False,  # the return code is asserted below, with stderr
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == returncode, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()], proc.stderr, elapsed


INIT = json.dumps({"event": "init", "operation": "upload", "remote": "origin", "concurrent": True, "concurrenttransfers": 8})
COMPACT_INIT = json.dumps(json.loads(INIT), separators=(",", ":"))  # as git-lfs writes it: launch.sh answers it


@pytest.mark.parametrize("launched", [False, True], ids=["python", "launch.sh"])
def test_upload_protocol_and_hostile_lines(tmp_path: Path, launched: bool) -> None:
    """Every answer the same whether Python or launch.sh answers `init` (then Python is
    handed the first request, which here is not JSON): one `{}`, then one group per request."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data = random_bytes(300_000, 1)
    oid, obj = put_lfs_object(tmp_path, data)
    other_oid, other = put_lfs_object(tmp_path, random_bytes(1000, 2))
    outside = tmp_path.parent / f"{tmp_path.name}-outside.bin"
    outside.write_bytes(data)
    # Beside git-lfs's storage, its name starting with the storage directory's: still outside.
    sibling = tmp_path / ".git" / "lfs-sibling" / "object.bin"
    sibling.parent.mkdir()
    sibling.write_bytes(data)
    store = tmp_path / "store"
    create_local_store(store)  # as `git xet install --standalone` does; the agent never creates one
    lines = [
        COMPACT_INIT if launched else INIT,
        "this is not json",
        json.dumps({"event": "upload", "oid": "../../etc", "size": 1, "path": str(obj)}),
        json.dumps({"event": "upload", "oid": oid, "size": "300000", "path": str(obj)}),
        json.dumps({"event": "whatever"}),
        json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(outside), "action": None}),
        json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(obj / ".." / ".." / ".." / ".." / ".." / ".." / outside.name)}),
        json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(sibling)}),
        json.dumps({"event": "upload", "oid": oid, "size": len(data) + 1, "path": str(obj), "action": None}),
        json.dumps({"event": "upload", "oid": oid, "size": 1000, "path": str(other), "action": None}),
        json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(obj), "action": None}),
        json.dumps({"event": "upload", "oid": "ab" * 32, "size": 5, "path": str(obj.parent / "missing"), "action": None}),
        json.dumps({"event": "terminate"}),
        json.dumps({"event": "upload", "oid": oid, "size": 1, "path": str(obj)}),  # after terminate: ignored
    ]
    out, stderr, _ = _agent(tmp_path, lines, {"GIT_XET_ENDPOINT": str(store)}, launched=launched)
    assert out[0] == {}
    # One object at a time: the answers split into groups, each ending in its `complete`.
    groups: list[list[dict]] = [[]]
    for message in out[1:]:
        groups[-1].append(message)
        if message.get("event") == "complete":
            groups.append([])
    assert groups.pop() == []  # nothing after terminate
    (bad_oid,), (bad_size,), outside_abs, outside_dotdot, outside_sibling, wrong_size, wrong_content, good, missing = groups
    assert bad_oid == {"event": "complete", "oid": "../../etc", "error": {"code": 32, "message": "git-xet: oid must be 64 lowercase hex digits"}}
    assert bad_size == {"event": "complete", "oid": oid, "error": {"code": 32, "message": "git-xet: size must be a non-negative integer"}}
    # The agent's first object reports its first byte at once (git-lfs's worker 0 holds the
    # others until it does); later ones report no byte before they have it.
    assert outside_abs[0]["event"] == "progress" and (outside_abs[0]["bytesSoFar"], outside_abs[0]["bytesSinceLast"]) == (1, 1)
    for group in (outside_dotdot, outside_sibling, wrong_size, missing):  # refused before a byte is read
        assert [m["event"] for m in group] == ["complete"]
    for refused in (outside_abs, outside_dotdot, outside_sibling):
        assert "outside this repository's LFS storage" in refused[-1]["error"]["message"]
    assert "300000 bytes, but the request says 300001" in wrong_size[-1]["error"]["message"]
    assert "does not match its oid" in wrong_content[-1]["error"]["message"]
    assert good[-1] == {"event": "complete", "oid": oid}
    progress = good[:-1]
    assert [p["bytesSoFar"] for p in progress] == sorted(p["bytesSoFar"] for p in progress)
    assert sum(p["bytesSinceLast"] for p in progress) == len(data)
    assert missing[-1]["oid"] == "ab" * 32 and missing[-1]["error"]["code"] == 2 and "missing" in missing[-1]["error"]["message"]
    assert "not JSON" in stderr
    # Refused requests stored nothing: the store knows the good file only.
    from git_xet.storage.cas_store import CasStore

    store_index = CasStore(store)
    assert store_index.file_by_sha256(oid) is not None
    assert store_index.file_by_sha256(other_oid) is None


def test_lfs_storage_that_is_a_symlink_elsewhere_is_still_its_storage(tmp_path: Path) -> None:
    """`.git/lfs` linked to another disk (as some set-ups do for space): its objects upload; a
    file beside the link's target is still outside."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    elsewhere = tmp_path / "big-disk" / "lfs"
    elsewhere.mkdir(parents=True)
    (repo / ".git" / "lfs").symlink_to(elsewhere)
    data = random_bytes(50_000, 3)
    oid, obj = put_lfs_object(repo, data)
    beside = elsewhere.parent / "beside.bin"
    beside.write_bytes(data)
    store = tmp_path / "store"
    create_local_store(store)
    lines = [
        INIT,
        json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(obj)}),
        json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(beside)}),
        json.dumps({"event": "terminate"}),
    ]
    out, stderr, _ = _agent(repo, lines, {"GIT_XET_ENDPOINT": str(store)})
    completes = [m for m in out if m.get("event") == "complete"]
    assert completes[0] == {"event": "complete", "oid": oid}, stderr
    assert "outside this repository's LFS storage" in completes[1]["error"]["message"]


def test_stdout_stays_clean_when_a_library_prints(tmp_path: Path) -> None:
    """Anything written to stdout by Python or C code inside the agent lands on stderr."""
    script = (
        "import os, sys\n"
        "from git_xet.agent.stdio import ProtocolOut\n"
        "out = ProtocolOut()\n"
        "print('stray print')\n"
        "os.write(1, b'stray fd write\\n')\n"
        "out.send('{}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "{}\n"
    assert "stray print" in proc.stderr and "stray fd write" in proc.stderr


def test_init_is_answered_quickly_and_eof_exits(tmp_path: Path) -> None:
    out, _, elapsed = _agent(tmp_path, [INIT])
    assert out == [{}]
    assert elapsed < 10  # generous: a timing bound here only guards against pathological start-up


# ---------------------------------------------------------------- a refused init is answered

_LINE_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=40)


def _not_an_init(line: str) -> bool:
    try:
        msg = json.loads(line)
    except ValueError:
        return bool(line.strip())
    return not isinstance(msg, dict) or msg.get("event") not in ("init", "terminate")


# What git-lfs could never send first, but a broken or hostile caller might: each case with a
# phrase its error must contain, derived from the input rather than from our message table.
_refused_inits = st.one_of(
    st.one_of(_LINE_TEXT, st.integers(), st.none(), st.booleans()).filter(lambda op: op not in ("upload", "download")).map(
        lambda op: (json.dumps({"event": "init", "operation": op, "remote": "origin", "concurrenttransfers": 8}), f"unknown operation {op!r}")
    ),
    _LINE_TEXT.filter(_not_an_init).map(lambda line: (line, "git-xet: ")),
    st.sampled_from(["upload", "download"]).map(
        lambda event: (json.dumps({"event": event, "oid": "ab" * 32, "size": 1, "path": "x", "action": None}), "first request must be init")
    ),
)


@settings(max_examples=12, deadline=None)
@given(case=_refused_inits)
def test_a_refused_init_gets_an_error_answer_and_the_agent_exits(tmp_path_factory, case: tuple[str, str]) -> None:
    """git-lfs waits for the answer to init: a refused one is answered with the protocol's
    error object (and nothing else, even for requests that follow), and the agent exits."""
    first, phrase = case
    out, _, _ = _agent(tmp_path_factory.mktemp("agent"), [first, INIT], returncode=1)
    assert len(out) == 1 and set(out[0]) == {"error"}, out
    assert out[0]["error"]["code"] == protocol.ERR_BAD_REQUEST
    message = out[0]["error"]["message"]
    assert message.startswith("git-xet: ") and phrase in message, message


def test_an_init_answered_by_the_launcher_that_python_cannot_read_stops_the_agent(tmp_path: Path) -> None:
    """launch.sh answers any compact line with `"event":"init"`; one Python refuses (an unknown
    operation) has had its answer, so the agent says why on stderr and stops, answering no more."""
    bad = json.dumps({"event": "init", "operation": "teleport", "remote": "origin"}, separators=(",", ":"))
    request = json.dumps({"event": "download", "oid": "ab" * 32, "size": 1, "action": None})
    out, stderr, _ = _agent(tmp_path, [bad, request], returncode=1, launched=True)
    assert out == [{}]
    assert "no init" in stderr and "teleport" in stderr


# ---------------------------------------------------------------- the init fast path's parser


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20), st.floats(allow_nan=False))
_flat_objects = st.dictionaries(st.text(max_size=12), _scalars, max_size=6)


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


@settings(max_examples=400, deadline=None)
@given(_flat_objects, st.sampled_from([None, 0, 1]), st.booleans())
def test_flat_parser_agrees_with_json_on_real_messages(obj: dict, indent, ensure_ascii: bool) -> None:
    text = json.dumps(obj, indent=indent, ensure_ascii=ensure_ascii)
    parsed = protocol.parse_flat_object(text)
    # It may decline (escapes, floats, newlines from indent...) but never disagrees.
    assert parsed is None or parsed == json.loads(text)


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=st.sampled_from('{}[]":, \t\n\\-0123456789abtrufenl.eE\x01é'), max_size=40))
def test_flat_parser_never_accepts_what_json_rejects(text: str) -> None:
    parsed = protocol.parse_flat_object(text)
    if parsed is not None:
        assert parsed == _json_or_none(text), text


def test_git_lfs_init_line_takes_the_fast_path() -> None:
    line = '{"event":"init","operation":"download","remote":"origin","concurrent":true,"concurrenttransfers":8}'
    assert protocol.parse_flat_object(line) == json.loads(line)
    init = protocol.parse_request(line)
    assert isinstance(init, protocol.Init) and (init.operation, init.remote, init.concurrent_transfers) == ("download", "origin", 8)


def test_to_a_server_the_oid_is_checked_by_the_server_not_hashed_twice(tmp_path: Path) -> None:
    """A `git xet serve` computes every file's sha256 before mapping its oid, so the agent sends
    git-lfs's oid instead of hashing the file again: an object whose content does not match its
    oid is still refused (by the server; the agent then says which file is wrong), and the right
    object is stored under its oid."""
    from tests.support.server_process import running_server

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    data = random_bytes(300_000, 3)
    oid, obj = put_lfs_object(tmp_path, data)
    _, other = put_lfs_object(tmp_path, random_bytes(300_000, 4))
    with running_server(tmp_path / "server" / "data") as server:
        lines = [
            INIT,
            json.dumps({"event": "upload", "oid": oid, "size": 300_000, "path": str(other), "action": None}),
            json.dumps({"event": "upload", "oid": oid, "size": len(data), "path": str(obj), "action": None}),
            json.dumps({"event": "terminate"}),
        ]
        out, stderr, _ = _agent(tmp_path, lines, {"GIT_XET_ENDPOINT": server.url, "GIT_XET_TOKEN": server.token("write")})
        wrong, good = [m for m in out if m.get("event") == "complete"]
        assert wrong["oid"] == oid and f"{other} does not match its oid" in wrong["error"]["message"], stderr
        # Both objects' shards reached the server: the agent had not hashed the wrong one; the
        # server registered its content without the claimed oid and said so (refused_sha256).
        shards = [line for line in server.log().splitlines() if ("/shards" in line or "/upload-bundles" in line) and '"status": 200' in line]
        assert len(shards) == 2, server.log()
        assert good == {"event": "complete", "oid": oid}, stderr
        resp = httpx.get(f"{server.url}/git-xet/v1/lfs-objects/{oid}", headers={"Authorization": f"Bearer {server.token('read')}"}, timeout=30)
        assert resp.status_code == 200 and resp.content == data
