"""Git LFS file locking on `git xet serve` (git-xet issue 45 §2, §3): real git, git-lfs (the
system's 3.3.0 and 3.6.1 from install/peers.sh) and several users, each with a token naming them,
on our server used as the repo's LFS endpoint (`lfs.url`); the git remote is a local bare repo.

Two sites: one server on SQLite, and two replicas on one PostgreSQL index, where each user talks
to a replica of their own (alice to the first, the others to the second), so every lock one
replica takes must be seen, refused and released through the other.

Adversarial tests act as a user holding a valid token: a reader, a writer of another repo or of
a namespace whose name shares a prefix, a non-admin forcing an unlock; each attack fails and
leaves the locks as they were.
"""

from __future__ import annotations

import http.client
import os
import secrets
import stat
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from git_xet.core.http_headers import LFS_MEDIA_TYPE
from git_xet.storage.index_base import LockRecord, MetadataIndex
from git_xet.storage.index_factory import open_index
from tests.support.datagen import random_bytes
from tests.support.gitenv import GitEnv, make_git_env, run_git_xet
from tests.support.postgres_process import Postgres
from tests.support.server_process import RunningServer, running_server

REPO = "team/game"
_databases = iter(range(10**6))


@dataclass
class Site:
    servers: list[RunningServer]  # one, or two replicas sharing an index
    index_url: str | None
    env: dict[str, str]  # what `git xet token` runs with (the replicas' shared secret)

    def url(self, user: str) -> str:
        """The server `user` talks to: alice to the first, everyone else to the last."""
        return self.servers[0 if user == "alice" else -1].url

    def token(self, scope: str, repo: str, user: str | None = None) -> str:
        args = ["token", "--data", str(self.servers[0].data_dir), "--scope", scope, "--repo", repo, "--ttl", "3600"]
        out = run_git_xet(*args, *(["--user", user] if user else []), env={**os.environ, **self.env}, timeout=60, check=True)
        return out.stdout.strip()

    def locks(self, repo: str = REPO) -> list[LockRecord]:
        """The repo's locks as the index holds them."""
        index: MetadataIndex = open_index(self.index_url, self.servers[0].data_dir)
        try:
            return index.find_locks(repo, limit=1000)
        finally:
            index.close()


@pytest.fixture(params=["sqlite", "replicas"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Site]:
    data_dir = tmp_path / "srv" / "data"
    if request.param == "sqlite":
        with running_server(data_dir) as server:
            yield Site([server], None, {})
        return
    postgres: Postgres = request.getfixturevalue("postgres")
    env = {"GIT_XET_SERVER_SECRET": secrets.token_hex(32)}
    index_url = postgres.create_database(f"locks_{next(_databases)}_{secrets.token_hex(4)}")
    with ExitStack() as stack:
        servers = [stack.enter_context(running_server(data_dir, "--index", index_url, log_name=f"replica{i}.log", env=env)) for i in range(2)]
        yield Site(servers, index_url, env)


def _user(tmp: Path, site: Site, name: str, token: str, lfs_path: str = "", agent: bool = True) -> GitEnv:
    """A user's git: our agent registered (`git xet install`), their token in a credential
    helper (Basic auth, their name as the user name), the LFS endpoint of REPO on their server
    with lock verification on."""
    g = make_git_env(tmp / name)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    if agent:
        g.git_xet("install")
    lfs_url = f"{site.url(name)}/{REPO}.git/info/lfs"
    g.use_credentials(token, username=name)
    g.git("config", "--global", "lfs.url", lfs_url)
    g.git("config", "--global", f"lfs.{lfs_url}.locksverify", "true")
    return g


def _writable(path: Path) -> bool:
    return bool(path.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def test_two_users_lock_push_and_unlock(site: Site, lfs_path: str, tmp_path: Path) -> None:
    alice = _user(tmp_path, site, "alice", site.token("write", "team/*", "alice"), lfs_path)
    bob = _user(tmp_path, site, "bob", site.token("write", REPO, "bob"), lfs_path)
    carol = _user(tmp_path, site, "carol", site.token("admin", "team/*", "carol"), lfs_path)
    remote = tmp_path / "remote.git"

    # alice starts the repo: *.bin in LFS and lockable, so checkouts are read-only until locked.
    work = alice.lfs_work_tree({"a.bin": random_bytes(20_000, 1), "b.bin": random_bytes(9_000, 2)}, remote=remote)
    alice.git("lfs", "track", "--lockable", "*.bin", cwd=work)
    alice.git("commit", "-qam", "lockable", cwd=work)
    alice.git("push", "-q", "origin", "main", cwd=work)

    bob.git("clone", "-q", str(remote), "work")
    theirs = bob.root / "work"
    assert (theirs / "a.bin").read_bytes() == (work / "a.bin").read_bytes()
    assert not _writable(theirs / "a.bin") and not _writable(theirs / "b.bin")

    alice.git("lfs", "lock", "a.bin", cwd=work)
    assert _writable(work / "a.bin")  # git-lfs makes a file writable for its locker
    listed = bob.git("lfs", "locks", cwd=theirs).stdout
    assert "a.bin" in listed and "alice" in listed
    [lock] = site.locks()
    assert (lock.path, lock.owner) == ("a.bin", "alice")

    refused = bob.git("lfs", "lock", "a.bin", cwd=theirs, check=False)
    assert refused.returncode != 0 and "alice" in refused.stdout + refused.stderr

    # bob changes alice's locked file anyway: git-lfs refuses his push, the remote keeps its head.
    head = alice.git("rev-parse", "main", cwd=remote).stdout
    os.chmod(theirs / "a.bin", 0o644)
    (theirs / "a.bin").write_bytes(random_bytes(7_000, 3))
    bob.git("commit", "-qam", "bob's change", cwd=theirs)
    push = bob.git("push", "origin", "main", cwd=theirs, check=False)
    assert push.returncode != 0 and "Cannot update locked files" in push.stdout + push.stderr, push
    assert alice.git("rev-parse", "main", cwd=remote).stdout == head

    # Neither unlocking nor forcing it is bob's to do; the lock stays.
    for args in (("a.bin",), ("--force", "a.bin"), ("--id", lock.id), ("--force", "--id", lock.id)):
        out = bob.git("lfs", "unlock", *args, cwd=theirs, check=False)
        assert out.returncode != 0, args
    assert site.locks() == [lock]

    # carol, an admin, forces it; then bob's push goes through.
    carol.git("clone", "-q", str(remote), "work")
    carol.git("lfs", "unlock", "--force", "a.bin", cwd=carol.root / "work")
    assert site.locks() == []
    bob.git("push", "-q", "origin", "main", cwd=theirs)
    assert alice.git("rev-parse", "main", cwd=remote).stdout != head

    # A user's own lock: taken, listed as theirs, released by them.
    alice.git("lfs", "lock", "b.bin", cwd=work)
    assert "b.bin" in alice.git("lfs", "locks", "--path", "b.bin", cwd=work).stdout
    alice.git("lfs", "unlock", "b.bin", cwd=work)
    assert site.locks() == []
    assert not _writable(work / "b.bin")  # read-only again once released


def test_concurrent_git_lfs_lock_of_one_path_one_wins(site: Site, tmp_path: Path) -> None:
    """Six users run `git lfs lock` on one path at once (half through each replica): exactly
    one gets it, and the index holds that one lock."""
    remote = tmp_path / "remote.git"
    users = [f"user{i}" if i else "alice" for i in range(6)]
    gits = {name: _user(tmp_path, site, name, site.token("write", REPO, name), agent=False) for name in users}
    first = gits["alice"]
    work = first.lfs_work_tree({"art.bin": b"pointer only"}, remote=remote)
    first.git("push", "-q", "origin", "main", cwd=work)
    for name in users[1:]:
        gits[name].env["GIT_LFS_SKIP_SMUDGE"] = "1"
        gits[name].git("clone", "-q", str(remote), "work")
    procs = {name: gits[name].popen("git", "lfs", "lock", "art.bin", cwd=gits[name].root / "work" if name != "alice" else work) for name in users}
    codes = {name: proc.wait(timeout=120) for name, proc in procs.items()}
    winners = [name for name, code in codes.items() if code == 0]
    assert len(winners) == 1, codes
    [lock] = site.locks()
    assert (lock.path, lock.owner) == ("art.bin", winners[0])


# ---------------------------------------------------------------------- the API, as an attacker


def _api(site: Site, user: str, token: str, method: str, path: str, body: dict | None = None, repo: str = REPO) -> httpx.Response:
    return httpx.request(
        method, f"{site.url(user)}/{repo}.git/info/lfs/{path}", json=body, auth=(user, token),
        headers={"Accept": LFS_MEDIA_TYPE}, timeout=30,
    )  # fmt: skip


def test_racing_lock_requests_through_both_replicas_one_wins_each_round(site: Site) -> None:
    users = [f"u{i}" for i in range(12)]
    tokens = {u: site.token("write", REPO, u) for u in users}
    for round_ in range(4):
        path = f"round{round_}.bin"
        barrier = threading.Barrier(len(users))
        answers: dict[str, httpx.Response] = {}

        def take(user: str, barrier: threading.Barrier = barrier, answers: dict = answers, path: str = path) -> None:
            barrier.wait()
            # u0, u2, ... through the first server, the others through the last
            answers[user] = _api(site, "alice" if int(user[1:]) % 2 == 0 else user, tokens[user], "POST", "locks", {"path": path})

        threads = [threading.Thread(target=take, args=(u,)) for u in users]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        statuses = sorted(r.status_code for r in answers.values())
        assert statuses == [201] + [409] * (len(users) - 1)
        [winner] = [u for u, r in answers.items() if r.status_code == 201]
        assert all(r.json()["lock"]["owner"]["name"] == winner for r in answers.values())
    assert len(site.locks()) == 4


def test_attacks_on_locks_fail_and_change_nothing(site: Site) -> None:
    alice = site.token("write", "team/*", "alice")
    lock = _api(site, "alice", alice, "POST", "locks", {"path": "hero.bin", "ref": {"name": "refs/heads/main"}}).json()["lock"]
    elsewhere = _api(site, "alice", alice, "POST", "locks", {"path": "hero.bin"}, repo="team/other").json()["lock"]
    before = (site.locks(), site.locks("team/other"))

    reader = site.token("read", REPO, "reader")
    assert _api(site, "reader", reader, "GET", "locks").status_code == 200  # reading is allowed
    assert _api(site, "reader", reader, "POST", "locks", {"path": "x.bin"}).status_code == 403
    assert _api(site, "reader", reader, "POST", "locks/verify", {}).status_code == 403
    assert _api(site, "reader", reader, "POST", f"locks/{lock['id']}/unlock", {"force": True}).status_code == 403

    bob = site.token("write", REPO, "bob")  # a writer, not an admin
    assert _api(site, "bob", bob, "POST", "locks", {"path": "hero.bin"}).status_code == 409
    assert _api(site, "bob", bob, "POST", f"locks/{lock['id']}/unlock", {}).status_code == 403
    assert _api(site, "bob", bob, "POST", f"locks/{lock['id']}/unlock", {"force": True}).status_code == 403
    verified = _api(site, "bob", bob, "POST", "locks/verify", {}).json()
    assert verified["ours"] == [] and [t["id"] for t in verified["theirs"]] == [lock["id"]]

    # A token for team/game cannot see or touch team/other's locks, even by the lock's id.
    assert _api(site, "bob", bob, "GET", "locks", repo="team/other").status_code == 403
    assert _api(site, "bob", bob, "POST", f"locks/{elsewhere['id']}/unlock", {"force": True}, repo="team/other").status_code == 403
    assert _api(site, "bob", bob, "POST", f"locks/{elsewhere['id']}/unlock", {}).status_code == 404  # not a lock of team/game

    # An admin of team/* is no admin of a namespace sharing its prefix, nor of what `..` reaches.
    admin = site.token("admin", "team/*", "carol")
    for repo in ("team-evil/x", "teamx/game", "team/game/deeper", "team"):
        assert _api(site, "carol", admin, "POST", "locks", {"path": "p.bin"}, repo=repo).status_code == 403, repo
        assert _api(site, "carol", admin, "GET", "locks", repo=repo).status_code == 403, repo
    for raw in ("/team/../team-evil/x.git/info/lfs/locks", "/team/%2e%2e/x.git/info/lfs/locks", "/team/./..%2fx.git/info/lfs/locks"):
        parts = urlsplit(site.url("carol"))
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)  # sent as written: no client normalizes the path
        conn.request("POST", raw, body=b'{"path": "p.bin"}', headers={"Authorization": f"Bearer {admin}", "Content-Type": LFS_MEDIA_TYPE})
        status = conn.getresponse().status
        conn.close()
        assert status in (403, 404), (raw, status)

    # The same check guards the other routes: the batch API, the Hub token route, and the CAS
    # routes, which act on the token's one repo (a pattern names none).
    base, auth = site.url("carol"), ("carol", admin)
    batch = {"operation": "upload", "transfers": ["xet"], "objects": []}
    assert httpx.post(f"{base}/team-evil/x.git/info/lfs/objects/batch", json=batch, auth=auth, timeout=30).status_code == 403
    assert httpx.post(f"{base}/team/game.git/info/lfs/objects/batch", json=batch, auth=auth, timeout=30).status_code == 200
    assert httpx.get(f"{base}/api/models/team-evil/x/xet-write-token/main", auth=auth, timeout=30).status_code == 403
    assert httpx.get(f"{base}/git-xet/v1/lfs-objects/{'0' * 64}", headers={"Authorization": f"Bearer {admin}"}, timeout=30).status_code == 403

    # A user-less token of another repo, and no token at all.
    stranger = site.token("write", "acme/model")
    assert _api(site, "bob", stranger, "POST", "locks", {"path": "y.bin"}).status_code == 403
    assert httpx.get(f"{site.url('bob')}/{REPO}.git/info/lfs/locks", timeout=30).status_code == 401
    assert (site.locks(), site.locks("team/other")) == before
    assert site.locks("team-evil/x") == [] and site.locks("acme/model") == []

    # And the admin may force it.
    forced = _api(site, "carol", admin, "POST", f"locks/{lock['id']}/unlock", {"force": True})
    assert forced.status_code == 200 and forced.json()["lock"]["owner"]["name"] == "alice"
    assert site.locks() == []


def test_list_pages_filters_and_user_less_tokens(site: Site) -> None:
    """A token minted without --user (as every token before users) still locks, as `token:ID`;
    listing pages through every lock by cursor, and filters by path, id and refspec."""
    token = site.token("write", REPO)
    paths = [f"dir/{i:02d}.bin" for i in range(7)]
    for i, path in enumerate(paths):
        ref = {"ref": {"name": "refs/heads/dev"}} if i == 3 else {}
        created = _api(site, "bob", token, "POST", "locks", {"path": path, **ref})
        assert created.status_code == 201 and created.headers["content-type"].startswith(LFS_MEDIA_TYPE)
        assert created.json()["lock"]["owner"]["name"].startswith("token:")
    seen, cursor = [], None
    while True:
        page = _api(site, "bob", token, "GET", "locks?limit=3" + (f"&cursor={cursor}" if cursor else "")).json()
        assert len(page["locks"]) <= 3
        seen += [lock["path"] for lock in page["locks"]]
        cursor = page.get("next_cursor")
        if not cursor:
            break
    assert seen == paths
    one = _api(site, "bob", token, "GET", f"locks?path={paths[2]}").json()["locks"]
    assert [lock["path"] for lock in one] == [paths[2]]
    assert _api(site, "bob", token, "GET", f"locks?id={one[0]['id']}").json()["locks"] == one
    on_main = _api(site, "bob", token, "GET", "locks?refspec=refs/heads/main").json()["locks"]
    assert [lock["path"] for lock in on_main] == [p for i, p in enumerate(paths) if i != 3]
    assert _api(site, "bob", token, "GET", "locks?limit=x").status_code == 422
    assert _api(site, "bob", token, "POST", "locks", {"path": ""}).status_code == 422
    ours = _api(site, "bob", token, "POST", "locks/verify", {"limit": 100}).json()
    assert len(ours["ours"]) == 7 and ours["theirs"] == []
