"""A token goes only to the store the user configured it for (git-xet issue 42 §4).

`git xet clone` takes the store from the cloned repository's committed `.xetconfig`: whoever
writes that file chooses where the clone's agents connect. The user's `xet.token` is bound to the
`xet.endpoint` of its own config scope (or given per store as `xet.<url>.token`), so a store the
repository names gets nothing of the user's unless the user configured a token for it.
Real git + git-lfs, our server on 127.0.0.1, and a counting server as the attacker's store.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.counting_server import CountingHandler, serving
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.server_process import running_server

FILES = {"model.bin": random_bytes(300_000, 70), "big.bin": random_bytes(2_500_000, 71)}


class AttackerStore(CountingHandler):
    """Records the Authorization header of every request (None: none sent); answers 404."""

    def _record(self) -> None:
        with self.server.lock:
            self.server.requests.append((self.path, self.headers.get("Authorization")))
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        body = b'{"error": "not found"}'
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_HEAD = _record


def _publish(g: GitEnv, host: Path, store: str, files: dict[str, bytes], push_to: tuple[str, str] | None = None) -> Path:
    """A repository on `host` whose .xetconfig names `store`; its LFS files pushed to the
    store and token `push_to` (when given) with the publisher's own configuration."""
    g.git("init", "--bare", str(host))
    g.git("clone", str(host), "work")
    work = g.root / "work"
    if push_to:  # the global endpoint + token pair, which every version reads
        g.git_xet("install", "--standalone", push_to[0])
        g.git("config", "--global", "xet.token", push_to[1])
    g.git("config", "-f", ".xetconfig", "xet.endpoint", store, cwd=work)
    g.git("lfs", "track", "*.bin", cwd=work)
    for name, data in files.items():
        (work / name).write_bytes(data)
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    g.git("push", "origin", "main", cwd=work)
    return work


def test_a_store_named_by_the_repository_gets_no_token(tmp_path: Path) -> None:
    """Bob uses his team's server (global `xet.endpoint` + `xet.token`, the documented set-up)
    and clones a repository whose .xetconfig names Mallory's store: the clone says no credential
    goes there, and Mallory's server sees requests without any Authorization header."""
    mallory = make_git_env(tmp_path / "mallory")
    with running_server(tmp_path / "srv" / "data") as honest, serving(AttackerStore) as attacker:
        _publish(mallory, tmp_path / "evil.git", attacker.url, FILES, push_to=(honest.url, honest.token("write", repo="mallory/evil")))
        bob = make_git_env(tmp_path / "bob")
        bob.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="1")
        bob.git_xet("install", "--standalone", honest.url)
        secret = honest.token("write")
        bob.git("config", "--global", "xet.token", secret)
        proc = bob.git_xet("clone", str(tmp_path / "evil.git"), "evil", check=False)
        assert attacker.requests, "the agents never reached the repository's store: the test proves nothing"
        assert all(auth is None for _, auth in attacker.requests), attacker.requests
        assert f"no credential will be sent to {attacker.url}" in proc.stdout, proc.stdout + proc.stderr
        assert secret not in bob.agent_log()


def test_the_configured_store_gets_its_token_and_clone_and_push_work(tmp_path: Path) -> None:
    """A teammate's clone of a repository naming the team's server: without a token for it the
    clone says exactly which command configures one; after running that command, checkout, push
    and a second clone work, and the existing global endpoint + token set-up keeps working."""
    alice = make_git_env(tmp_path / "alice")
    with running_server(tmp_path / "srv" / "data") as srv:
        alice.git_xet("install", "--standalone", srv.url)  # the documented global pair
        alice.git("config", "--global", "xet.token", srv.token("write"))
        _publish(alice, tmp_path / "host.git", srv.url, FILES)

        bob = make_git_env(tmp_path / "bob")
        bob.env.update(GIT_XET_RETRY_MAX_ATTEMPTS="1")
        bob.git("lfs", "install", "--skip-repo")
        first = bob.git_xet("clone", str(tmp_path / "host.git"), "mine", check=False)
        assert f"no credential will be sent to {srv.url}" in first.stdout, first.stdout + first.stderr
        command = re.search(r"`(git config --global xet\.\S+\.token) <token>`", first.stdout)
        assert command is not None and command.group(1) == f"git config --global xet.{srv.url}.token", first.stdout
        bob.git(*command.group(1).split()[1:], srv.token("write"))
        mine = bob.root / "mine"
        bob.git("checkout", "HEAD", "--", ".", cwd=mine)
        for name, data in FILES.items():
            assert (mine / name).read_bytes() == data
        (mine / "model.bin").write_bytes(b"bob" + FILES["model.bin"])
        bob.git("commit", "-am", "bob's edit", cwd=mine)
        bob.git("push", "origin", "main", cwd=mine)
        second = bob.git_xet("clone", str(tmp_path / "host.git"), "again")
        assert f"a token will be sent to {srv.url} (xet.{srv.url}.token)" in second.stdout
        assert (bob.root / "again" / "model.bin").read_bytes() == b"bob" + FILES["model.bin"]
        alice.git("pull", cwd=alice.root / "work")
        assert (alice.root / "work" / "model.bin").read_bytes() == b"bob" + FILES["model.bin"]


def test_a_token_for_a_plain_http_store_off_this_machine_is_refused_before_anything_is_sent(tmp_path: Path) -> None:
    """A token configured for http://<not loopback> is never sent: the push fails with the fix
    before any connection (the store's host does not even resolve: nothing to observe there)."""
    g = make_git_env(tmp_path)
    g.git_xet("install", "--no-check", "--standalone", "http://xet-store.git-xet.invalid:8080")
    g.git("config", "--global", "xet.token", "xet1.secret.token")
    g.git("init", "--bare", "r.git")
    g.git("clone", "r.git", "work")
    work = g.root / "work"
    g.git("lfs", "track", "*.bin", cwd=work)
    (work / "a.bin").write_bytes(random_bytes(10_000, 72))
    g.git("add", ".", cwd=work)
    g.git("commit", "-m", "v1", cwd=work)
    push = g.git("push", "origin", "main", cwd=work, check=False)
    assert push.returncode != 0 and "refusing to send the XET token" in push.stderr and "over plain http" in push.stderr, push.stderr
    assert "secret" not in push.stderr and "secret" not in g.agent_log()


