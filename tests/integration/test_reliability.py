"""Faults, crashes and load, with real git, git-lfs, agents and `git xet serve`.

The fault proxy (tests/support/fault_proxy.py) is the one stand-in: it sits between the agents and the
real server and fails requests on cue. Everything else is the real thing.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

from git_xet.core.hashes import hash_to_hex
from git_xet.core.http_headers import bearer
from git_xet.core.xorb import verify_xorb
from git_xet.pipelines.file_hashing import hash_bytes
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.fault_proxy import FaultPlan, FaultRate, fault_proxy
from tests.support.gitenv import GitEnv, agent_peak_rss, agent_pids, cached_xorbs, completed_oids, make_git_env, record_agent_rss
from tests.support.objects import assert_stored_whole
from tests.support.server_process import RunningServer, running_server

MIB = 1 << 20


def _repo_with(g: GitEnv, name: str, files: dict[str, bytes]) -> Path:
    """A bare remote `<name>.git` and a work tree `<name>` with `files` committed as LFS."""
    return g.lfs_work_tree(files, work=name, remote=f"{name}.git")


def _assert_clone_matches(g: GitEnv, remote: str, dest: str, files: dict[str, bytes]) -> None:
    g.git("clone", "-q", remote, dest)
    for file_name, data in files.items():
        assert (g.root / dest / file_name).read_bytes() == data, file_name
    assert "Git LFS fsck OK" in g.git("lfs", "fsck", cwd=g.root / dest).stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _retry_env(g: GitEnv, http_timeout: float | None = None) -> None:
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="10", GIT_XET_RETRY_BASE_DELAY="0.02")
    if http_timeout is not None:  # only where the proxy stalls: a loaded CI machine is slow too
        g.env["GIT_XET_HTTP_TIMEOUT"] = str(http_timeout)


# ---------------------------------------------------------------------------------- faults


def test_push_and_clone_many_files_through_ten_percent_faults(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    _retry_env(g, http_timeout=3.0)
    files = {f"f{i:02d}.bin": random_bytes(size, 100 + i) for i, size in enumerate([1, 700, 40_000, 300_000, 1_500_000, 3_000_000] * 3)}
    files["big.bin"] = random_bytes(9 * MIB, 99)
    rate = FaultRate(0.10, seed=7, stall_seconds=4.0)
    with running_server(tmp_path / "srv" / "data") as srv, fault_proxy(srv.url, rate) as proxy:
        g.git_xet("install", "--standalone", proxy)
        g.git("config", "--global", "xet.token", srv.token("write"))
        work = _repo_with(g, "repo", files)
        g.git("push", "-q", "origin", "main", cwd=work)
        _assert_clone_matches(g, "repo.git", "clone", files)
        # A second clone with a fresh shard cache and LFS store: every object downloaded again.
        g.env["GIT_XET_CACHE"] = str(tmp_path / "cache2")
        _assert_clone_matches(g, "repo.git", "clone2", files)
        assert not [e for e in srv.requests() if e["status"] >= 500], "the server itself must never fail"
    # Enough faults of enough kinds that the test means something (the seed fixes the sequence).
    assert rate.requests > 80 and rate.faults_injected >= 8, (rate.requests, rate.by_kind)
    assert len(rate.by_kind) >= 5, rate.by_kind


def test_clone_from_a_dead_server_fails_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="2", GIT_XET_RETRY_BASE_DELAY="0.05")
    files = {"model.bin": random_bytes(2 * MIB, 3)}
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        work = _repo_with(g, "repo", files)
        g.git("push", "-q", "origin", "main", cwd=work)
    failed = g.git("clone", "repo.git", "clone", check=False)
    assert "git-xet: download of" in failed.stderr and "failed" in failed.stderr
    lfs = g.root / "clone" / ".git" / "lfs"
    assert [p for p in lfs.rglob("*") if p.is_file() and "logs" not in p.parts] == []  # no object, no temp file (git-lfs keeps its error log)
    checked_out = g.root / "clone" / "model.bin"
    assert not checked_out.exists() or checked_out.read_bytes().startswith(b"version https://git-lfs")  # never partial


def test_tokens_and_xorb_urls_expiring_mid_transfer_are_renewed(tmp_path: Path) -> None:
    """Hub-style negotiation with 8 s CAS tokens (git-lfs itself refuses batch actions that
    expire within 5 s) and 2 s xorb URLs, and requests held 2.5 s on the way: every expiry
    is met by a renewal, and the data arrives byte-exact."""
    g = make_git_env(tmp_path)
    files = {"weights.bin": random_bytes(5 * MIB, 21), "small.bin": random_bytes(10_000, 22)}
    plan = FaultPlan(delay={"/v1/xorbs/": 1, "/v1/xorb-data/": 2}, delay_seconds=2.5)
    with running_server(tmp_path / "srv" / "data", "--cas-token-ttl", "8", "--url-ttl", "2") as srv, fault_proxy(srv.url, plan) as proxy:
        user_token = srv.token("write", repo="acme/model")
        g.git_xet("install")  # no standalone mode: the server negotiates, as the Hub does
        g.use_credentials(user_token)
        g.git("config", "--global", "lfs.url", f"{proxy}/acme/model.git/info/lfs")
        work = _repo_with(g, "repo", files)
        g.git("push", "-q", "origin", "main", cwd=work)
        _assert_clone_matches(g, "repo.git", "clone", files)
        log = srv.requests()
    assert plan.faults_injected == 3
    assert [e for e in log if e["path"].startswith("/v1/xorb-data/") and e["status"] == 403], "no xorb URL expired"
    assert len([e for e in log if "-token/" in e["path"]]) >= 2, "no token was renewed"
    writes = ("/v1/xorbs/", "/v1/xorb-grants/", "/v1/xorb-commits/", "/v2/shards")
    assert not [e for e in log if e["status"] == 401 and e["path"].startswith(writes)], "a write went out with an expired token"


# --------------------------------------------------------------------------------- crashes


def _held_push(g: GitEnv, work: Path, plan: FaultPlan):
    """Start `git push`; return once the proxy holds its second xorb upload and the agent
    has recorded the first as stored (in its shard cache, the resume point)."""
    push = g.popen("git", "push", "origin", "main", cwd=work)
    assert plan.held.wait(timeout=120), "the push never reached its second xorb"
    cache = Path(g.env["GIT_XET_CACHE"])
    deadline = time.monotonic() + 60
    while not cached_xorbs(cache):
        assert time.monotonic() < deadline, "the first xorb was never recorded as stored"
        time.sleep(0.05)
    return push


def _file_hex(data: bytes) -> str:
    return hash_to_hex(hash_bytes(data).file_hash)


def _assert_not_exposed(srv_url: str, token: str, file_hex: str) -> None:
    import httpx

    resp = httpx.get(f"{srv_url}/v1/reconstructions/{file_hex}", headers=bearer(token), timeout=30)
    assert resp.status_code == 404, resp.text


def _xorb_uploads(srv: RunningServer) -> list[str]:
    """The xorbs uploaded (their POSTs: a directory server offers no grants), in order."""
    return [e["path"] for e in srv.requests() if e["path"].startswith("/v1/xorbs/") and e["status"] == 200]


def test_kill_9_agent_mid_push_then_the_next_push_resends_only_what_is_missing(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    _retry_env(g)
    data = random_bytes(150 * MIB, 8)  # three xorbs
    plan = FaultPlan(hold={"/v1/xorbs/": 1})
    with running_server(tmp_path / "srv" / "data") as srv, fault_proxy(srv.url, plan) as proxy:
        g.git_xet("install", "--standalone", proxy)
        token = srv.token("write")
        g.git("config", "--global", "xet.token", token)
        work = _repo_with(g, "repo", {"model.bin": data})
        push = _held_push(g, work, plan)
        agents = agent_pids(g)
        assert agents
        for pid in agents:
            os.kill(pid, signal.SIGKILL)
        assert push.wait(timeout=120) != 0
        first = _xorb_uploads(srv)
        assert len(first) == 1  # one xorb stored, the second held when the agent died
        _assert_not_exposed(srv.url, token, _file_hex(data))

        plan.release()
        g.git("push", "-q", "origin", "main", cwd=work)
        second = _xorb_uploads(srv)[1:]
        assert first[0] not in second, "the xorb stored before the crash was sent again"
        assert 1 <= len(second) <= 2
        _assert_clone_matches(g, "repo.git", "clone", {"model.bin": data})


def test_kill_9_server_mid_push_then_restart_and_push_again(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    _retry_env(g)
    g.env["GIT_XET_RETRY_MAX_ATTEMPTS"] = "3"
    data = random_bytes(150 * MIB, 9)
    port = _free_port()
    data_dir = tmp_path / "srv" / "data"
    plan = FaultPlan(hold={"/v1/xorbs/": 1}, stall_seconds=5.0)
    with running_server(data_dir, port=port) as srv, fault_proxy(srv.url, plan) as proxy:
        g.git_xet("install", "--standalone", proxy)
        token = srv.token("write")
        g.git("config", "--global", "xet.token", token)
        work = _repo_with(g, "repo", {"model.bin": data})
        push = _held_push(g, work, plan)
        srv.process.kill()  # SIGKILL: no drain, no cleanup
        srv.process.wait(timeout=30)
        plan.release()
        assert push.wait(timeout=300) != 0

        with running_server(data_dir, port=port) as restarted:
            _assert_not_exposed(restarted.url, token, _file_hex(data))
            # Whatever the store holds is whole: every indexed xorb verifies.
            store = CasStore(data_dir)
            for key, _mtime in store.objects.list("xorbs/"):
                verify_xorb(store.objects.read(key))
            stored_before = len(_xorb_uploads(restarted))
            g.git("push", "-q", "origin", "main", cwd=work)
            assert len(_xorb_uploads(restarted)) - stored_before <= 2  # the stored xorb is not resent
            assert store.file_by_sha256(hashlib.sha256(data).hexdigest()) is not None
            _assert_clone_matches(g, "repo.git", "clone", {"model.bin": data})


# ------------------------------------------------------------------------------------ load


def test_two_pushes_and_a_clone_at_once_sharing_one_cache(tmp_path: Path) -> None:
    g = make_git_env(tmp_path)
    rss_file = tmp_path / "agent-rss.txt"
    sets = {
        name: {f"{name}-{i}.bin": random_bytes(size, seed * 100 + i) for i, size in enumerate([200_000, 800_000, 2_000_000, 5_000_000] * 3)}
        for seed, name in enumerate(("a", "b", "c"), start=1)
    }
    # b and c share a file with a (cross-repo dedup through the shared cache and the server).
    sets["b"]["shared.bin"] = sets["a"]["a-3.bin"]
    sets["c"]["shared.bin"] = sets["a"]["a-3.bin"]
    with running_server(tmp_path / "srv" / "data") as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        record_agent_rss(g, rss_file)
        a = _repo_with(g, "a", sets["a"])
        g.git("push", "-q", "origin", "main", cwd=a)
        b, c = _repo_with(g, "b", sets["b"]), _repo_with(g, "c", sets["c"])

        results: dict[str, int] = {}

        def run(name: str, *args: str, cwd: Path) -> None:
            results[name] = g.run("git", *args, cwd=cwd, check=False, timeout=600).returncode

        threads = [
            threading.Thread(target=run, args=("push b", "push", "-q", "origin", "main"), kwargs={"cwd": b}),
            threading.Thread(target=run, args=("push c", "push", "-q", "origin", "main"), kwargs={"cwd": c}),
            threading.Thread(target=run, args=("clone a", "clone", "-q", "a.git", "a-clone"), kwargs={"cwd": g.root}),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=700)
        assert results == {"push b": 0, "push c": 0, "clone a": 0}, g.agent_log()[-3000:]
        for file_name, content in sets["a"].items():
            assert (g.root / "a-clone" / file_name).read_bytes() == content
        _assert_clone_matches(g, "b.git", "b-clone", sets["b"])
        _assert_clone_matches(g, "c.git", "c-clone", sets["c"])
        assert not [e for e in srv.requests() if e["status"] >= 500]
    peaks = agent_peak_rss(rss_file)
    assert len(peaks) >= 24  # 8 agents for each of the three commands, at least
    assert max(peaks) < 300, f"an agent peaked at {max(peaks):.0f} MiB"


def test_kill_9_server_mid_push_of_small_files_keeps_every_object_git_lfs_saw_complete(tmp_path: Path) -> None:
    """Each object is durable on the server (object files, index commit) before its agent says
    `complete`: kill -9 the server while agents are pushing many small files (no proxy, no hold:
    the real request path), restart it, and every object git-lfs saw completed is there, whole."""
    g = make_git_env(tmp_path)
    g.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="2", GIT_XET_RETRY_BASE_DELAY="0.02", GIT_TRANSFER_TRACE="1")
    files = {f"f{i:03d}.bin": random_bytes(4096 + (i * 7919) % (60 * 1024), 500 + i) for i in range(200)}
    by_oid = {hashlib.sha256(data).hexdigest(): data for data in files.values()}
    port = _free_port()
    data_dir = tmp_path / "srv" / "data"
    with running_server(data_dir, port=port) as srv:
        g.git_xet("install", "--standalone", srv.url)
        g.git("config", "--global", "xet.token", srv.token("write"))
        work = _repo_with(g, "repo", files)
        trace = tmp_path / "push.trace"
        with open(trace, "w") as err:
            push = subprocess.Popen(["git", "push", "origin", "main"], cwd=work, env=g.env, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + 120
        while len(completed_oids(trace.read_text(errors="replace"))) < 20:
            assert push.poll() is None, "the push ended before the server could be killed"
            assert time.monotonic() < deadline, "the push never completed 20 objects"
            time.sleep(0.01)
        srv.process.kill()  # SIGKILL mid-push: no drain, no cleanup
        srv.process.wait(timeout=30)
        assert push.wait(timeout=300) != 0
    completed = completed_oids(trace.read_text(errors="replace"))
    assert 20 <= len(completed) < len(files), "the server was not killed mid-push"
    assert completed <= by_oid.keys()

    with running_server(data_dir, port=port):
        assert_stored_whole(data_dir, completed, by_oid)  # after the crash
