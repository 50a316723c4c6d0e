"""launch.sh, the agent as `git xet install` registers it: it answers git-lfs's `init` itself,
starts the agent's command only for an agent given a request, and hands that command exactly
what it read (the `init` it answered and the first line it did not handle) with the rest of
its input untouched. Run under every POSIX shell here that git-lfs's `sh` may be."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.agent.transfer import LAUNCHED_INIT, LAUNCHED_REQUEST, LAUNCHER

SHELLS = [shell for shell in (("sh",), ("dash",), ("bash",), ("bash", "--posix"), ("busybox", "sh")) if shutil.which(shell[0])]
INIT = json.dumps({"event": "init", "operation": "download", "remote": "origin", "concurrent": True, "concurrenttransfers": 8}, separators=(",", ":"))
TERMINATE = '{"event":"terminate"}'

# Stands in for the agent: reports what the launcher handed it, as JSON on one line.
_REPORT = f"""
import json, os, sys
print(json.dumps({{"init": os.environ.get({LAUNCHED_INIT!r}), "request": os.environ.get({LAUNCHED_REQUEST!r}),
                  "rest": sys.stdin.buffer.read().decode("utf-8", "surrogateescape"), "args": sys.argv[1:]}}))
"""


def _launch(shell: tuple[str, ...], stdin: bytes, *command: str, env: dict[str, str] | None = None) -> tuple[list[str], int]:
    command = command or (sys.executable, "-c", _REPORT, "transfer")
    proc = subprocess.run([*shell, LAUNCHER, *command], input=stdin, capture_output=True, timeout=60, check=False, env=env)
    assert not proc.stderr, proc.stderr
    return proc.stdout.decode().splitlines(), proc.returncode


def test_at_least_the_shell_git_lfs_runs_is_tested() -> None:
    assert ("sh",) in SHELLS


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("stdin", [f"{INIT}\n{TERMINATE}\n", f"{INIT}\n\n\n{TERMINATE}\n", f"{INIT}\n", f"{INIT}\n{TERMINATE}", ""])
def test_an_agent_given_no_object_answers_init_and_never_starts_the_agent(shell: tuple[str, ...], stdin: str, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    out, code = _launch(shell, stdin.encode(), "touch", str(marker))
    assert (out, code) == ((["{}"] if stdin else []), 0)
    assert not marker.exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_an_agent_given_a_request_starts_the_agent_with_what_was_read(shell: tuple[str, ...]) -> None:
    request = json.dumps({"event": "download", "oid": "ab" * 32, "size": 5, "action": None})
    rest = f"{json.dumps({'event': 'download', 'oid': 'cd' * 32, 'size': 1})}\n\n{TERMINATE}\n"
    out, code = _launch(shell, f"{INIT}\n\n{request}\n{rest}".encode())
    assert code == 0 and out[0] == "{}" and len(out) == 2
    assert json.loads(out[1]) == {"init": INIT, "request": request, "rest": rest, "args": ["transfer"]}


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("first", ['{"event": "init", "operation": "upload"}', "this is not json", TERMINATE.replace(":", ": ")])
def test_a_first_line_that_is_not_a_compact_init_is_left_to_the_agent_unanswered(shell: tuple[str, ...], first: str) -> None:
    """What the launcher cannot be sure of, Python judges (and answers) as it always did."""
    out, code = _launch(shell, f"{first}\n{TERMINATE}\n".encode())
    assert code == 0 and len(out) == 1
    assert json.loads(out[0]) == {"init": None, "request": first, "rest": f"{TERMINATE}\n", "args": ["transfer"]}


@pytest.mark.parametrize("shell", SHELLS)
def test_a_last_request_without_its_newline_still_starts_the_agent(shell: tuple[str, ...]) -> None:
    request = json.dumps({"event": "download", "oid": "ef" * 32, "size": 1})
    out, _code = _launch(shell, f"{INIT}\n{request}".encode())
    assert out[0] == "{}" and json.loads(out[1])["request"] == request


@pytest.mark.parametrize("shell", SHELLS)
def test_values_inherited_from_the_environment_never_reach_the_agent(shell: tuple[str, ...]) -> None:
    """Only what this launcher read is handed on: a stale GIT_XET_LAUNCHED_INIT in the
    environment would make Python take a line nobody answered for an answered `init`."""
    env = {"PATH": os.environ["PATH"], LAUNCHED_INIT: "stale", LAUNCHED_REQUEST: "stale"}
    first = TERMINATE.replace(":", ": ")  # not compact: handed to the agent as read
    out, _code = _launch(shell, f"{first}\n".encode(), env=env)
    handed = json.loads(out[0])
    assert handed["init"] is None and handed["request"] == first


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)


@settings(max_examples=40, deadline=None)
@given(path=_text, header=_text, pad=st.tuples(st.text(" \t", max_size=2), st.text(" \t", max_size=2)))
def test_any_request_line_reaches_the_agent_byte_for_byte(path: str, header: str, pad: tuple[str, str]) -> None:
    """Backslashes, quotes, `$`, `%`, backticks, non-ASCII and blanks around a request (a path,
    a server's header) are the shell's usual traps: the line arrives as it was sent."""
    request = json.dumps({"event": "upload", "oid": "01" * 32, "size": 3, "path": path, "action": {"header": {"Authorization": header}}}, ensure_ascii=False)
    request = pad[0] + request + pad[1]
    out, code = _launch(("sh",), f"{INIT}\n{request}\n{TERMINATE}\n".encode())
    assert code == 0 and out[0] == "{}"
    assert json.loads(out[1])["request"] == request


def test_doctor_checks_every_file_the_registered_command_names(tmp_path: Path) -> None:
    """`git xet doctor` passes the registered agent only if the shell, launch.sh and the agent
    it starts all exist: a deleted environment leaves the launcher's arguments dangling."""
    from git_xet.commands.doctor import _agent_runnable

    agent = tmp_path / "env with space" / "git-xet"
    agent.parent.mkdir()
    agent.write_text("")
    args = f"'{LAUNCHER}' '{agent}' transfer"
    assert _agent_runnable("sh", args)
    assert _agent_runnable(str(agent), "transfer")  # an installation from before the launcher
    agent.unlink()
    assert not _agent_runnable("sh", args)
    assert not _agent_runnable("sh", f"'{LAUNCHER}' '{agent}")  # unbalanced quote: no shell runs it
    assert not _agent_runnable(str(tmp_path / "gone"), "transfer")


UPLOAD_INIT = INIT.replace('"download"', '"upload"')


def _under_git_lfs(shell: tuple[str, ...], lfs_args: list[str], init: str, env: dict[str, str] | None = None) -> list[str]:
    """launch.sh run by a stand-in git-lfs (a copy of `shell` named git-lfs, so /proc names it
    so) whose argv ends with `lfs_args`, as git-lfs runs it (through `sh -c`). Paths go in the
    environment: this checkout's path may hold "prune", and the stand-in's argv must not."""
    bin_dir = Path(tempfile.mkdtemp(prefix="lfs-"))
    try:
        stand_in = bin_dir / "git-lfs"
        shutil.copy(shutil.which(shell[0]) or shell[0], stand_in)
        script = 'sh -c \'"$0" "$L" "$P" -c "$R" transfer; :\' "$S"; :'  # (a last `:`: no exec)
        env = {**os.environ, **(env or {}), "L": LAUNCHER, "P": sys.executable, "R": _REPORT, "S": shell[0]}
        proc = subprocess.run([str(stand_in), *shell[1:], "-c", script, *lfs_args], input=f"{init}\n{TERMINATE}\n".encode(), capture_output=True, timeout=60, check=False, env=env)
    finally:
        shutil.rmtree(bin_dir)
    assert not proc.stderr, proc.stderr
    return proc.stdout.decode().splitlines()


PRUNES = [["prune", "--verify-remote"], ["prune"], ["fetch", "--prune"], ["fetch", "origin", "-rp"]]
NOT_PRUNING = [["filter-process"], ["fetch", "origin"], ["pull"], ["push", "--all", "origin"], ["fetch", "--recent"]]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("lfs_args", PRUNES)
def test_a_download_init_from_a_git_lfs_that_prunes_is_left_to_the_agent(shell: tuple[str, ...], lfs_args: list[str]) -> None:
    out = _under_git_lfs(shell, lfs_args, INIT)
    assert len(out) == 1 and json.loads(out[0])["request"] == INIT  # unanswered, handed over as read


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("lfs_args", NOT_PRUNING)
def test_a_download_init_from_any_other_git_lfs_is_answered_by_the_launcher(shell: tuple[str, ...], lfs_args: list[str]) -> None:
    assert _under_git_lfs(shell, lfs_args, INIT) == ["{}"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("shell", SHELLS)
def test_upload_inits_and_the_checks_own_commands_are_answered_by_the_launcher(shell: tuple[str, ...]) -> None:
    assert _under_git_lfs(shell, ["prune"], UPLOAD_INIT) == ["{}"]
    assert _under_git_lfs(shell, ["prune"], INIT, env={"GIT_XET_PRUNE_CHECK": "1"}) == ["{}"]


def test_a_launcher_whose_parent_is_outside_its_pid_namespace_answers_init_quietly() -> None:
    """Its parent's pid reads 0 there (a container's first process, an `unshare -p`): no
    /proc/0 exists, and the walk up to git-lfs must neither print a shell's failed redirection
    nor take that for "no /proc" (which hands every download init to Python)."""
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("a pid namespace needs unshare and root (CI runs as root)")
    init = '{"event":"init","operation":"download","remote":"origin","concurrent":true,"concurrenttransfers":8}\n{"event":"terminate"}\n'
    done = subprocess.run(["unshare", "-p", "-f", "--mount-proc", "sh", LAUNCHER, "false"], input=init, capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "{}\n", "")
