"""Two `git xet serve` replicas on one PostgreSQL index behind nginx with TLS (a certificate
signed by a private CA the test makes; our client trusts it through SSL_CERT_FILE), in both of
the README's shapes: objects in one shared directory, and objects in an S3 bucket (SeaweedFS)
with upload grants on, the deployment of `tests/support/deployment.py`.

Everything is real and started here: PostgreSQL (a private cluster), SeaweedFS, nginx, the
replicas, git and git-lfs with our agent. Pushes go through nginx, which spreads requests over
both replicas; the same files are pushed through both at once, a replica is killed with SIGKILL
mid-push, PostgreSQL is restarted mid-push, and the pushes complete (our client retries; nginx
sends the retries to the live replica). Afterwards `git xet fsck` must find the store clean:
nothing half-registered, no staged grant upload left behind, every xorb stored once.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from git_xet.storage.cas_store import CasStore
from git_xet.storage.index_postgres import PostgresIndex
from tests.support.datagen import random_bytes
from tests.support.deployment import running_deployment
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.nginx_process import Nginx, reserve_port, running_nginx
from tests.support.postgres_process import Postgres
from tests.support.seaweed import RunningS3
from tests.support.server_process import RunningServer, running_server

_databases = iter(range(10**6))


@dataclass
class Cluster:
    nginx: Nginx
    replicas: list[RunningServer]
    store: Callable[[], CasStore]  # the shared store as an admin tool opens it; close() it
    token: Callable[[str], str]  # a user token every replica accepts, for a scope
    admin_args: list[str]  # the store options of `git xet fsck` / `gc`
    admin_env: dict[str, str]  # what admin commands run with (the secret; AWS_* for a bucket)

    def requests_served(self, replica: int, path_part: str) -> int:
        return sum(1 for line in self.replicas[replica].log().splitlines() if path_part in line)

    def fsck(self) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return subprocess.run(
            [sys.executable, "-m", "git_xet", "fsck", *self.admin_args],
            check=False, capture_output=True, text=True, timeout=120, env={**env, **self.admin_env},
        )  # fmt: skip


@pytest.fixture(params=["directory", "s3"])
def cluster(request: pytest.FixtureRequest, tmp_path: Path, postgres: Postgres) -> Iterator[Cluster]:
    """Two replicas behind nginx on one PostgreSQL index, with their objects in a shared
    directory or (`s3`) in a SeaweedFS bucket with upload grants on."""
    if request.param == "s3":
        seaweed: RunningS3 = request.getfixturevalue("seaweed")
        with running_deployment(tmp_path / "deployment", seaweed, postgres) as d:
            yield Cluster(d.nginx, d.replicas, d.store, d.token, d.admin_args(), d.env)
        return
    # The secret every replica (and `git xet token`) reads from the environment, never from --data.
    env = {"GIT_XET_SERVER_SECRET": secrets.token_hex(32)}
    index_url = postgres.create_database(f"replicas_{next(_databases)}_{secrets.token_hex(4)}")
    data_dir = tmp_path / "shared" / "data"
    port = reserve_port()
    public = f"https://localhost:{port}"
    with ExitStack() as stack:
        replicas = [
            stack.enter_context(running_server(data_dir, "--index", index_url, "--public-url", public, log_name=f"replica{i}.log", env=env))
            for i in range(2)
        ]
        upstreams = [r.url.removeprefix("http://") for r in replicas]
        nginx = stack.enter_context(running_nginx(upstreams, port))

        def token(scope: str) -> str:
            out = subprocess.run(
                [sys.executable, "-m", "git_xet", "token", "--data", str(data_dir), "--scope", scope, "--ttl", "3600"],
                capture_output=True, text=True, check=True, timeout=60, env={**os.environ, **env},
            )  # fmt: skip
            return out.stdout.strip()

        yield Cluster(
            nginx, replicas, lambda: CasStore(data_dir, index=PostgresIndex(index_url)), token,
            ["--data", str(data_dir), "--index", index_url], env,
        )  # fmt: skip


def _git(tmp: Path, cluster: Cluster, name: str) -> GitEnv:
    g = make_git_env(tmp / name)
    g.env.update(SSL_CERT_FILE=str(cluster.nginx.cert), GIT_XET_RETRY_BASE_DELAY="0.5")
    g.git_xet("install", "--standalone", cluster.nginx.url)
    g.git("config", "--global", "xet.token", cluster.token("write"))
    g.git("config", "--global", "http.sslCAInfo", str(cluster.nginx.cert))
    return g


def _assert_clone(g: GitEnv, files: dict[str, bytes], name: str = "clone") -> None:
    g.git("clone", "remote.git", name)
    for file, data in files.items():
        assert (g.root / name / file).read_bytes() == data, file


def _assert_store_clean(cluster: Cluster, allow_orphans: bool = False) -> None:
    """fsck finds every indexed object present and valid. Objects nothing indexes are allowed
    only where a writer was killed (`allow_orphans`): then `gc --grace 0` removes them, and a
    second fsck must find none; a grant's staged upload counts as one."""
    fsck = cluster.fsck()
    assert fsck.returncode == 0 and ", 0 problems, " in fsck.stdout, fsck.stdout + fsck.stderr
    if allow_orphans and "0 orphaned objects, 0 unused xorbs" not in fsck.stdout:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        subprocess.run(
            [sys.executable, "-m", "git_xet", "gc", "--grace", "0", *cluster.admin_args],
            check=True, capture_output=True, text=True, timeout=120, env={**env, **cluster.admin_env},
        )  # fmt: skip
        fsck = cluster.fsck()
        assert fsck.returncode == 0 and ", 0 problems, " in fsck.stdout, fsck.stdout + fsck.stderr
    assert "0 orphaned objects, 0 unused xorbs" in fsck.stdout, fsck.stdout


def _push_while(g: GitEnv, work: Path, cluster: Cluster, event) -> None:
    """Push in the background; once xorb bytes are flowing, do `event()`; the push must succeed."""
    push = g.popen("git", "push", "origin", "main", cwd=work)
    deadline = time.monotonic() + 120
    while sum(cluster.requests_served(i, "/v1/xorb") for i in range(2)) == 0:
        assert push.poll() is None, f"the push ended before any xorb was sent: {(g.root / 'popen.log').read_text()[-3000:]}"
        assert time.monotonic() < deadline, "no xorb upload started within 120 s"
        time.sleep(0.02)
    event()
    assert push.wait(timeout=600) == 0, (g.root / "popen.log").read_text()[-3000:] + g.agent_log()[-3000:]


def test_two_replicas_behind_tls_push_and_clone_the_same_files_at_once(tmp_path: Path, cluster: Cluster) -> None:
    files = {"a.bin": random_bytes(9_000_000, 301), "b.bin": random_bytes(5_000_000, 302), "tiny.bin": b"tiny" * 100}
    clients = [_git(tmp_path, cluster, f"client{i}") for i in range(2)]
    works = [g.lfs_work_tree(files) for g in clients]
    pushes = [g.popen("git", "push", "origin", "main", cwd=w) for g, w in zip(clients, works)]
    for g, p in zip(clients, pushes):
        assert p.wait(timeout=600) == 0, (g.root / "popen.log").read_text()[-3000:] + g.agent_log()[-3000:]
    # Everything went through nginx over TLS, which spread the work over both replicas.
    assert "/v1/xorb" in cluster.nginx.access_log() and "/shards" in cluster.nginx.access_log()
    assert all(cluster.requests_served(i, "shards") + cluster.requests_served(i, "/v1/xorb") > 0 for i in range(2))
    store = cluster.store()
    for data in files.values():
        assert store.file_by_sha256(hashlib.sha256(data).hexdigest()) is not None
    assert store.stats()["files"] == len(files)  # two registrations of each file: one row each
    store.close()
    # Each xorb stored once: every object under xorbs/ is indexed and used, no staged copy left.
    _assert_store_clean(cluster)
    for g in clients:
        _assert_clone(g, files)


def test_a_replica_killed_mid_push_and_the_push_completes_through_the_other(tmp_path: Path, cluster: Cluster) -> None:
    files = {"big.bin": random_bytes(48_000_000, 303)}
    g = _git(tmp_path, cluster, "client")
    work = g.lfs_work_tree(files)
    victim = cluster.replicas[0].process
    _push_while(g, work, cluster, lambda: victim.send_signal(signal.SIGKILL))
    assert victim.wait(timeout=30) == -signal.SIGKILL
    _assert_clone(g, files)
    _assert_store_clean(cluster, allow_orphans=True)


def test_postgres_restarted_mid_push(tmp_path: Path, cluster: Cluster, postgres: Postgres) -> None:
    files = {"big.bin": random_bytes(40_000_000, 304), "small.bin": random_bytes(300_000, 305)}
    g = _git(tmp_path, cluster, "client")
    work = g.lfs_work_tree(files)

    def restart() -> None:
        postgres.stop(signal.SIGKILL)  # a crash: every replica's connections break at once
        time.sleep(2.0)  # the push meanwhile runs on: its index calls wait, or fail and are retried
        postgres.start()

    _push_while(g, work, cluster, restart)
    _assert_clone(g, files)
    _assert_store_clean(cluster)


def test_a_replica_without_a_shared_secret_refuses_to_start(tmp_path: Path, postgres: Postgres, monkeypatch: pytest.MonkeyPatch) -> None:
    """With --index, a secret only in --data would differ per replica: serve says what to do."""
    monkeypatch.delenv("GIT_XET_SERVER_SECRET", raising=False)
    url = postgres.create_database(f"nosecret_{secrets.token_hex(4)}")
    out = subprocess.run(
        [sys.executable, "-m", "git_xet", "serve", "--data", str(tmp_path / "d"), "--index", url, "--port", "0"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 1 and not out.stdout
    assert "GIT_XET_SERVER_SECRET" in out.stderr and "--secret-file" in out.stderr
    secret = tmp_path / "secret"
    secret.write_text(secrets.token_hex(32))
    with running_server(tmp_path / "d", "--index", url, "--secret-file", str(secret)) as srv:
        assert srv.process.poll() is None  # the same command with --secret-file runs
