"""The agents of one git-lfs command share a fork server (agent/handover.py, fork_server.py):
each agent's objects are served by a worker forked from it, never by a process of another
user, and only for agents identical to the one that started it; any agent it does not serve
serves itself. Driven by tests/support/lfs_harness.py, which stands in for git-lfs."""

from __future__ import annotations

import array
import hashlib
import json
import marshal
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import git_xet.agent

from git_xet.agent.handover import address
from git_xet.agent.handover_wire import FORMAT, REFUSED
from git_xet.client.location import create_local_store
from tests.support.agent_runs import local_store_env, put_lfs_object

HARNESS = Path(__file__).resolve().parents[1] / "support" / "lfs_harness.py"
LAUNCHER = Path(git_xet.agent.__file__).resolve().parent / "launch.sh"
NOBODY = 65534


def _repo_with_objects(tmp_path: Path, count: int) -> tuple[Path, list[tuple[str, bytes, Path]]]:
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    rng = random.Random(count)
    objects = []
    for _ in range(count):
        data = rng.randbytes(rng.randrange(1, 70_000))
        oid, path = put_lfs_object(repo, data)
        objects.append((oid, data, path))
    return repo, objects


def _run_harness(plan: dict, at_pause: Callable[[str, int], None] | None = None) -> dict:
    """Run the harness on `plan`; at each pause it asks for, call at_pause(point, harness pid)."""
    proc = subprocess.Popen([sys.executable, str(HARNESS)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps(plan) + "\n")
        proc.stdin.flush()
        for _ in plan.get("pause_at", ()):
            pause = json.loads(proc.stdout.readline())
            assert at_pause is not None
            at_pause(pause["pause"], pause["pid"])
            proc.stdin.write("go\n")
            proc.stdin.flush()
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    return json.loads(out)


def _uploads(objects: list[tuple[str, bytes, Path]], agents: int) -> list[list[dict]]:
    """The objects' upload requests, dealt to `agents` agents in turn."""
    dealt: list[list[dict]] = [[] for _ in range(agents)]
    for i, (oid, data, path) in enumerate(objects):
        dealt[i % agents].append({"event": "upload", "oid": oid, "size": len(data), "path": str(path)})
    return dealt


def _served_by(report: dict, index: int) -> list[dict]:
    """The processes other than agent `index` (and its sh) that hold its stdin: its worker."""
    agent = report["agents"][index]
    sh = next(h["ppid"] for h in report["holders"][index] if h["pid"] == agent)
    return [h for h in report["holders"][index] if h["pid"] not in (agent, sh)]


def _completed(answers: list[dict]) -> list[dict]:
    done = [a for a in answers if a.get("event") == "complete"]
    assert all("error" not in a for a in done), done
    return done


def test_with_accelerators_off_each_agent_serves_itself(tmp_path: Path) -> None:
    """GIT_XET_PORTABLE=1 (platform/switch.py): no fork server, so no process but the agent
    (and its sh) holds its stdin, and the objects are stored all the same."""
    repo, objects = _repo_with_objects(tmp_path, 6)
    create_local_store(tmp_path / "store")
    env = {**local_store_env(tmp_path, tmp_path / "store"), "GIT_XET_PORTABLE": "1"}
    plan = {"operation": "upload", "cwd": str(repo), "agents": [{"env": env, "requests": r} for r in _uploads(objects, 3)]}
    report = _run_harness(plan)
    assert sum(len(_completed(a)) for a in report["answers"]) == len(objects)
    assert report["exit_codes"] == [0, 0, 0]
    assert [_served_by(report, i) for i in range(3)] == [[], [], []]

def test_the_agents_of_one_command_are_served_by_workers_of_one_fork_server(tmp_path: Path) -> None:
    repo, objects = _repo_with_objects(tmp_path, 10)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    plan = {"operation": "upload", "cwd": str(repo), "agents": [{"env": env, "requests": r} for r in _uploads(objects, 4)]}
    report = _run_harness(plan)
    assert sum(len(_completed(a)) for a in report["answers"]) == len(objects)
    assert report["exit_codes"] == [0, 0, 0, 0]
    workers = [_served_by(report, i) for i in range(4)]
    assert all(len(w) == 1 for w in workers), workers
    servers = {w[0]["ppid"] for w in workers}
    assert len(servers) == 1  # one fork server ...
    (server,) = servers
    assert server not in report["agents"] and all(w[0]["pid"] not in report["agents"] for w in workers)
    # nothing left running once the agents are gone: the agent that started the server stopped it
    assert [pid for pid in (server, *(w[0]["pid"] for w in workers)) if os.path.exists(f"/proc/{pid}")] == []

    # ... and what the workers stored reads back through download agents (served the same way)
    downloads = [{"event": "download", "oid": oid, "size": len(data)} for oid, data, _ in objects]
    plan = {"operation": "download", "cwd": str(repo), "agents": [{"env": env, "requests": downloads[i::3]} for i in range(3)]}
    report = _run_harness(plan)
    got = {a["oid"]: Path(a["path"]).read_bytes() for answers in report["answers"] for a in _completed(answers)}
    assert {oid: hashlib.sha256(data).hexdigest() for oid, data in got.items()} == {oid: oid for oid, _, _ in objects}
    assert all(len(_served_by(report, i)) == 1 for i in range(3))


def _progress_adds_up(answers: list[dict], sizes: dict[str, int]) -> None:
    """Each object's progress as git-lfs adds it up: bytesSoFar rising, each step's
    bytesSinceLast the difference, the last at the object's size, all before its complete."""
    shown: dict[str, int] = {}
    for answer in answers:
        oid = answer["oid"]
        if answer["event"] == "progress":
            assert answer["bytesSoFar"] > shown.get(oid, 0) and answer["bytesSinceLast"] == answer["bytesSoFar"] - shown.get(oid, 0), answers
            shown[oid] = answer["bytesSoFar"]
        else:
            assert shown.get(oid, 0) == sizes[oid], (oid, answers)


def test_launched_agents_show_each_first_byte_before_their_handover_and_once(tmp_path: Path) -> None:
    """Started through launch.sh, an agent reports its first object's first byte before it
    hands over (git-lfs holds its other workers until worker 0 shows progress), and neither its
    worker nor, when refused one, the agent itself reports that byte again."""
    repo, objects = _repo_with_objects(tmp_path, 10)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    odd = {**env, "GIT_XET_SOMETHING_ELSE": "1"}  # refused by the first agent's server: serves itself
    deal = _uploads(objects, 4)
    plan = {"operation": "upload", "cwd": str(repo), "launcher": str(LAUNCHER), "agents": [{"env": e, "requests": r} for e, r in zip((env, env, odd, env), deal)]}
    report = _run_harness(plan)
    assert sum(len(_completed(a)) for a in report["answers"]) == len(objects)
    assert [len(_served_by(report, i)) for i in range(4)] == [1, 1, 0, 1]
    sizes = {oid: len(data) for oid, data, _ in objects}
    for requests, answers in zip(deal, report["answers"]):
        assert answers[0] == {"event": "progress", "oid": requests[0]["oid"], "bytesSoFar": 1, "bytesSinceLast": 1}
        _progress_adds_up(answers, sizes)


def test_an_agent_unlike_the_first_serves_its_objects_itself(tmp_path: Path) -> None:
    """A worker is a copy of the first agent: an agent with another environment is refused and
    serves itself, while agents like the first are still served by workers."""
    repo, objects = _repo_with_objects(tmp_path, 6)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    odd = {**env, "GIT_XET_SOMETHING_ELSE": "1"}
    deal = _uploads(objects, 3)
    plan = {"operation": "upload", "cwd": str(repo), "agents": [{"env": env, "requests": deal[0]}, {"env": odd, "requests": deal[1]}, {"env": env, "requests": deal[2]}]}
    report = _run_harness(plan)
    assert sum(len(_completed(a)) for a in report["answers"]) == len(objects)
    assert [len(_served_by(report, i)) for i in range(3)] == [1, 0, 1]


def test_a_worker_exits_when_its_agent_is_killed(tmp_path: Path) -> None:
    """git-lfs kills agents that outlive `terminate`: the worker serving one must not run on."""
    repo, objects = _repo_with_objects(tmp_path, 4)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    plan = {"operation": "upload", "cwd": str(repo), "agents": [{"env": env, "requests": r} for r in _uploads(objects, 2)], "kill": 0}
    report = _run_harness(plan)
    assert report["killed_worker_gone"] is True
    assert report["exit_codes"][1] == 0


def _lfs_id(pid: int) -> str:
    """The id agents of the git-lfs process `pid` meet under (agent/lineage.py)."""
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
        text = stat.read()
    return f"{pid}-{text[text.rindex(')') + 2 :].split()[19]}"


def _forked(work: Callable[[Callable[[str], None]], None], *, uid: int | None) -> tuple[int, int]:
    """Run work(say) in a forked child (as `uid` if given); say(line) reaches the read end of a
    pipe. Returns (child pid, read end). Forked rather than run: the other user may not be
    allowed to execute this interpreter."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            if uid is not None:
                os.setgid(uid)
                os.setuid(uid)
            work(lambda line: os.write(write_end, (line + "\n").encode()) and None)
        finally:
            os._exit(0)
    os.close(write_end)
    return pid, read_end


def _read_all(pid: int, read_end: int) -> str:
    with os.fdopen(read_end, "r") as lines:
        text = lines.read()
    os.waitpid(pid, 0)
    return text


def _asker(where: bytes) -> Callable[[Callable[[str], None]], None]:
    """A client sending a request (of an identity no agent has) with its stdio, saying the answer."""

    def ask(say: Callable[[str], None]) -> None:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.settimeout(20)
        conn.connect(where)
        request = marshal.dumps((FORMAT, ("not", "an", "agent"), "0-0", b"", ""))
        try:
            conn.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2]))])
            answer = conn.recv(16)
        except (BrokenPipeError, ConnectionResetError):  # closed on us before the request was read
            answer = b""
        say(repr(answer))

    return ask


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_a_fork_server_answers_no_other_user(tmp_path: Path) -> None:
    """Abstract sockets have no permissions: anyone may connect. Another user's process gets no
    answer at all, where this user's process sending the same request is told no: the uid is
    checked before anything the request says."""
    repo, objects = _repo_with_objects(tmp_path, 2)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    answers: dict[str, str] = {}

    def probe(point: str, harness: int) -> None:
        where = address(_lfs_id(harness), "upload")
        answers["other user"] = _read_all(*_forked(_asker(where), uid=NOBODY)).strip()
        answers["same user"] = _read_all(*_forked(_asker(where), uid=None)).strip()

    plan = {"operation": "upload", "cwd": str(repo), "agents": [{"env": env, "requests": r} for r in _uploads(objects, 2)], "pause_at": ["terminate"]}
    report = _run_harness(plan, probe)
    assert answers == {"other user": "b''", "same user": repr(REFUSED)}
    assert sum(len(_completed(a)) for a in report["answers"]) == 2


Answer = Callable[[socket.socket, Callable[[str], None]], None]


def _count_descriptors(conn: socket.socket, say: Callable[[str], None]) -> None:
    """Say how many descriptors the connection sent."""
    conn.settimeout(3)
    try:
        _, ancillary, _, _ = conn.recvmsg(1 << 20, 64)
        say(f"fds {sum(len(data) // 4 for _, _, data in ancillary)}")
    except OSError:
        say("fds 0")


def _holder(where: bytes, answer: Answer) -> Callable[[Callable[[str], None]], None]:
    """A server holding the socket's name, giving each connection to `answer`, until killed."""

    def hold(say: Callable[[str], None]) -> None:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        listener.bind(where)
        listener.listen(16)
        say("listening")
        while True:
            conn, _ = listener.accept()
            with conn:
                answer(conn, say)

    return hold


def _run_with_the_name_held(plan: dict, answer: Answer, uid: int | None) -> tuple[dict, list[str]]:
    """Run the harness on `plan` while a server answering with `answer`, forked (as `uid` if
    given) before the first agent starts, holds the name of the command's fork server: the
    harness's report, and the lines the server said."""
    held: list[tuple[int, int]] = []

    def hold(point: str, harness: int) -> None:
        pid, read_end = _forked(_holder(address(_lfs_id(harness), plan["operation"]), answer), uid=uid)
        held.append((pid, read_end))
        assert os.read(read_end, 10) == b"listening\n"

    try:
        report = _run_harness({**plan, "pause_at": ["start"]}, hold)
    finally:
        for pid, _ in held:
            os.kill(pid, signal.SIGKILL)
    return report, _read_all(*held[0]).split("\n")


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")
def test_agents_hand_nothing_to_another_users_server(tmp_path: Path) -> None:
    """Another user who takes the socket's name first (it can predict it) is not trusted: the
    agents see its uid, send it nothing (no descriptors, no environment) and serve themselves."""
    repo, objects = _repo_with_objects(tmp_path, 4)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    plan = {"operation": "upload", "cwd": str(repo), "agents": [{"env": env, "requests": r} for r in _uploads(objects, 2)]}
    report, received = _run_with_the_name_held(plan, _count_descriptors, uid=NOBODY)
    assert sum(len(_completed(a)) for a in report["answers"]) == 4
    assert [len(_served_by(report, i)) for i in range(2)] == [0, 0]
    assert received[:2] == ["fds 0", "fds 0"]  # both agents connected, and sent nothing


def _refuse_saying_shown(conn: socket.socket, say: Callable[[str], None]) -> None:
    """Say which oid the request says its agent already showed progress for, and refuse it
    (the agent serves itself)."""
    message, ancillary, _, _ = conn.recvmsg(1 << 20, 64)
    for _, _, data in ancillary:
        for fd in array.array("i", data[: len(data) - len(data) % 4]):
            os.close(fd)
    say(f"shown {marshal.loads(message)[4] or '-'}")
    conn.sendall(REFUSED)


def test_an_agent_shows_its_first_byte_before_it_hands_its_object_over(tmp_path: Path) -> None:
    """The byte is on git-lfs's pipe before the agent asks the fork server (whose start and
    imports take ~0.1-0.2 s): the request already says so, and the agent refused by it shows
    nothing twice."""
    repo, objects = _repo_with_objects(tmp_path, 4)
    create_local_store(tmp_path / "store")
    env = local_store_env(tmp_path, tmp_path / "store")
    deal = _uploads(objects, 2)
    plan = {"operation": "upload", "cwd": str(repo), "launcher": str(LAUNCHER), "agents": [{"env": env, "requests": r} for r in deal]}
    report, said = _run_with_the_name_held(plan, _refuse_saying_shown, uid=None)
    assert sorted(line for line in said if line.startswith("shown")) == sorted(f"shown {r[0]['oid']}" for r in deal)
    sizes = {oid: len(data) for oid, data, _ in objects}
    for requests, answers in zip(deal, report["answers"]):
        assert answers[0] == {"event": "progress", "oid": requests[0]["oid"], "bytesSoFar": 1, "bytesSinceLast": 1}
        _progress_adds_up(answers, sizes)
    assert [len(_served_by(report, i)) for i in range(2)] == [0, 0]
