"""The group sender wired into the agents (agent/group_link.py, issue 44 §2): a real `git push`
of many small files through `git xet serve` sends fewer upload bundles than files, and every
file comes back; kill -9 of the agent running the sender loses nothing git-lfs saw complete;
another local user can neither answer for the sender nor send through it."""

from __future__ import annotations

import array
import hashlib
import json
import os
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from git_xet.agent import group_link
from git_xet.agent.group_link import CommandGroup
from git_xet.client.group_send import SEND_ALONE
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.serve_extension import ServeExtension
from git_xet.client.tokens import StaticToken
from git_xet.core.bundle_merge import BundleParts
from git_xet.core.extension import UPLOAD_BUNDLES
from git_xet.platform import local_sockets
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, completed_oids, make_git_env
from tests.support.objects import assert_stored_whole, bundle_parts
from tests.support.server_process import RunningServer, running_server

FILES = 200
OTHER_UID = 65534  # nobody


def _small_files(seed: int) -> dict[str, bytes]:
    return {f"f{i:03d}.bin": random_bytes(100 + (i * 7919) % 8000, seed + i) for i in range(FILES)}


def _bundle_posts(server: RunningServer, since: int) -> int:
    return sum(1 for r in server.requests()[since:] if r["path"] == UPLOAD_BUNDLES and r["method"] == "POST")


def _installed(tmp_path: Path, srv: RunningServer) -> GitEnv:
    g = make_git_env(tmp_path)
    g.git_xet("install", "--standalone", srv.url)
    g.git("config", "--global", "xet.token", srv.token("write"))
    return g


def test_a_push_of_small_files_sends_them_in_fewer_bundles_and_every_file_comes_back(tmp_path: Path) -> None:
    files = _small_files(3000)
    with running_server(tmp_path / "srv" / "data") as srv:
        g = _installed(tmp_path, srv)
        work = g.lfs_work_tree(files, work="repo", remote="repo.git")
        before = len(srv.requests())
        g.git("push", "-q", "origin", "main", cwd=work)
        posts = _bundle_posts(srv, before)
        print(f"{FILES} small files pushed in {posts} upload bundles")
        assert 0 < posts < FILES * 3 // 4
        g.git("clone", "-q", str(g.root / "repo.git"), "back")
        for name, data in files.items():
            assert (g.root / "back" / name).read_bytes() == data, name


def _sender_pid(since: set[int]) -> int | None:
    """The agent process listening on a group sender's socket (its name ends in /send/<key>)."""
    inodes = set()
    with open("/proc/net/unix") as table:
        for line in table.read().splitlines()[1:]:
            fields = line.split()
            # Flags 00010000: listening; the path column of an abstract name starts with '@'.
            if len(fields) >= 8 and fields[3] == "00010000" and fields[7].startswith(f"@git-xet-agents/{os.getuid()}/") and "/send/" in fields[7]:
                inodes.add(fields[6])
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in since:
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") in {f"socket:[{inode}]" for inode in inodes}:
                    return int(pid)
        except OSError:
            continue
    return None


def test_kill_9_of_the_sending_agent_mid_push_loses_nothing_git_lfs_saw_complete(tmp_path: Path) -> None:
    """The agents whose bundles the killed sender held hear EOF and post their own (the server
    stores a bundle idempotently); every object git-lfs saw complete is stored, whole."""
    files = _small_files(4000)
    by_oid = {hashlib.sha256(data).hexdigest(): data for data in files.values()}
    with running_server(tmp_path / "srv" / "data") as srv:
        g = _installed(tmp_path, srv)
        g.env.update(GIT_TRANSFER_TRACE="1", GIT_XET_RETRY_MAX_ATTEMPTS="2", GIT_XET_RETRY_BASE_DELAY="0.02")
        work = g.lfs_work_tree(files, work="repo", remote="repo.git")
        trace = tmp_path / "push.trace"
        already = {int(p) for p in os.listdir("/proc") if p.isdigit()}
        with open(trace, "w") as err:
            push = subprocess.Popen(["git", "push", "origin", "main"], cwd=work, env=g.env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 120
        sender = None
        while sender is None or len(completed_oids(trace.read_text(errors="replace"))) < 20:
            assert push.poll() is None, "the push ended before its sender could be killed"
            assert time.monotonic() < deadline, "no group sender, or the push never completed 20 objects"
            sender = sender or _sender_pid(already)
            time.sleep(0.01)
        os.kill(sender, signal.SIGKILL)
        # Bounded: the first agent once waited for its fork server after its worker was killed,
        # and the push for it (handover.py WORKER_LOST).
        status = push.wait(timeout=120)
        completed = completed_oids(trace.read_text(errors="replace"))
        print(f"push exited {status}, {len(completed)} of {FILES} objects complete")
        assert len(completed) >= 20 and completed <= by_oid.keys()
        assert_stored_whole(srv.data_dir, completed, by_oid)


# ------------------------------------------------------------------------- another local user


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, ServeExtension]]:
    with running_server(tmp_path_factory.mktemp("grouplink") / "data") as srv:
        backend = HttpCasBackend(srv.url, StaticToken(srv.token("write")), extension=True)
        ext = backend.extension
        assert ext is not None and ext.offered.upload_bundles
        yield srv, ext
        backend.close()


def _parts(seed: int) -> BundleParts:
    data = random_bytes(500, seed)
    xorbs, shard = bundle_parts([data], True, [hashlib.sha256(data).digest()])
    return BundleParts.of(xorbs, shard)


def _as_other_user(job: str, where: bytes) -> tuple[int, int]:
    """Fork a child that drops to OTHER_UID and does `job` at `where`; its pid and the read end
    of a pipe on which it writes "ready" (a squatter, once bound) and then what happened."""
    read, write = os.pipe()
    pid = os.fork()
    if pid != 0:
        os.close(write)
        return pid, read
    os.close(read)
    outcome = "error"
    try:
        os.setgid(OTHER_UID)
        os.setuid(OTHER_UID)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        conn.settimeout(20)
        if job == "squat":  # hold the sender's name first, and see whether a bundle arrives
            conn.bind(where)
            conn.listen(8)
            os.write(write, b"ready\n")
            try:
                peer, _ = conn.accept()
                peer.settimeout(5)
                outcome = "got a bundle" if peer.recvmsg(4096, socket.CMSG_SPACE(4))[0] else "no bundle"
            except (TimeoutError, OSError):
                outcome = "no bundle"
        else:  # send a bundle through the user's sender
            conn.connect(where)
            parts = _parts(77)
            fd = os.memfd_create("b")
            os.write(fd, b"".join(body for _, body in parts.xorbs) + parts.shard)
            key = where.decode().rsplit("/", 1)[1]
            header = json.dumps([group_link.FORMAT, key, [[h, len(b)] for h, b in parts.xorbs], len(parts.shard)]).encode()
            try:
                conn.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
                outcome = "answered" if conn.recv(1) else "no answer"
            except OSError:
                outcome = "no answer"
    except BaseException as exc:  # noqa: BLE001 -- reported to the test
        outcome = f"error: {exc!r}"
    finally:
        os.write(write, outcome.encode() + b"\n")
        os._exit(0)


def _lines(read: int) -> list[str]:
    with open(read, "rb") as pipe:
        return pipe.read().decode().split()


def _needs_root() -> None:
    if os.getuid() != 0:
        pytest.skip("making a second local user's process needs root (setuid); run as root to check this")


def test_another_user_holding_the_senders_name_gets_no_bundle(served: tuple[RunningServer, ServeExtension]) -> None:
    _needs_root()
    srv, ext = served
    lfs_process = f"test-{uuid.uuid4().hex}"
    key = group_link._key(ext.backend.endpoint, ext.backend.token())
    child, pipe = _as_other_user("squat", local_sockets.address(f"{lfs_process}/send/{key}"))
    assert os.read(pipe, 6) == b"ready\n"
    before = len(srv.requests())
    group = CommandGroup(lfs_process, ext)
    try:
        assert group.send(_parts(11)) == SEND_ALONE  # its agent posts its own bundle
    finally:
        group.close()
    os.waitpid(child, 0)
    assert _lines(pipe) == ["no", "bundle"]
    assert _bundle_posts(srv, before) == 0


def test_another_user_cannot_send_through_the_users_sender(served: tuple[RunningServer, ServeExtension]) -> None:
    _needs_root()
    srv, ext = served
    lfs_process = f"test-{uuid.uuid4().hex}"
    key = group_link._key(ext.backend.endpoint, ext.backend.token())
    group = CommandGroup(lfs_process, ext)
    try:
        group.send(_parts(12))  # this agent now runs the sender
        before = len(srv.requests())
        child, pipe = _as_other_user("send", local_sockets.address(f"{lfs_process}/send/{key}"))
        os.waitpid(child, 0)
        assert _lines(pipe) == ["no", "answer"]
        assert _bundle_posts(srv, before) == 0
    finally:
        group.close()
