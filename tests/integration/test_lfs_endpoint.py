"""Each repository's Git LFS endpoint on `git xet serve` (git-xet issue 45 §1, §5, §6).

A committed `.lfsconfig` (`git xet setup-repo URL`) makes a plain `git clone` work for every
teammate: Alice has the agent registered (`git xet install`: xet both ways), Bob has stock
git-lfs only (`basic` both ways: PUTs stored as XET on the server, downloads from the bridge).
Real git and git-lfs (the system's 3.3.0 and 3.6.1 from install/peers.sh), our server on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path


from tests.support.datagen import random_bytes
from tests.support.deployment import running_deployment
from tests.support.docs_blocks import run_block
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.objects import stored_objects
from tests.support.postgres_process import Postgres
from tests.support.seaweed import RunningS3
from tests.support.server_process import RunningServer, running_server

REPO_ROOT = Path(__file__).resolve().parents[2]
REPO = "acme/models"


def teammate(root: Path, srv: RunningServer, lfs_path: str, *, agent: bool, scope: str = "write") -> GitEnv:
    """A teammate's machine: git-lfs installed, our agent registered or not, a token for REPO
    in a credential helper (what `git credential approve` would store)."""
    g = make_git_env(root)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    g.git("lfs", "install", "--skip-repo")
    if agent:
        g.git_xet("install")
    token = srv.token(scope, repo=REPO)
    g.use_credentials(token)
    return g


def count(srv: RunningServer, method: str, fragment: str) -> int:
    """Requests of `method` whose path has `fragment`, answered 2xx."""
    return sum(r["method"] == method and fragment in r["path"] and 200 <= r["status"] < 300 for r in srv.requests())


def stored_bytes(srv: RunningServer) -> int:
    return sum(stored_objects(srv.data_dir).values())


def test_plain_clone_push_pull_for_agent_and_stock_teammates(tmp_path: Path, lfs_path: str) -> None:
    remote = tmp_path / "remote.git"
    with running_server(tmp_path / "srv" / "data") as srv:
        alice = teammate(tmp_path / "alice", srv, lfs_path, agent=True)
        bob = teammate(tmp_path / "bob", srv, lfs_path, agent=False)
        v1 = random_bytes(9_000_000, 45)
        work = alice.lfs_work_tree({"model.bin": v1}, remote=remote)
        alice.git_xet("setup-repo", f"{srv.url}/{REPO}", cwd=work)
        alice.git("commit", "-qm", "LFS objects live on our server", cwd=work)
        alice.git("push", "-q", "origin", "main", cwd=work)
        assert count(srv, "POST", "/v1/xorbs") >= 1, "the agent's push was not XET"
        assert count(srv, "PUT", "/info/lfs/basic/") == 0

        # Bob: a plain clone with stock git-lfs gets the file through the bridge.
        bob.git("clone", "-q", str(remote), "bob-work")
        bob_work = bob.root / "bob-work"
        assert (bob_work / "model.bin").read_bytes() == v1
        assert count(srv, "GET", "/xet-bridge-us/") == 1

        # Bob edits and pushes: a basic PUT, stored as XET, deduplicated against Alice's push.
        before = stored_bytes(srv)
        v2 = bytearray(v1)
        v2[4_000_000:4_000_100] = b"b" * 100
        (bob_work / "model.bin").write_bytes(bytes(v2))
        bob.git("commit", "-qam", "bob's edit", cwd=bob_work)
        bob.git("push", "-q", "origin", "main", cwd=bob_work)
        assert count(srv, "PUT", f"/{REPO}.git/info/lfs/basic/") == 1
        assert stored_bytes(srv) - before < len(v2) // 10, "Bob's basic upload was not deduplicated against Alice's"

        # Alice pulls Bob's version natively (a XET reconstruction, not the bridge).
        reconstructions = count(srv, "GET", "/v2/reconstructions/")
        alice.git("pull", "-q", cwd=work)
        assert (work / "model.bin").read_bytes() == bytes(v2)
        assert count(srv, "GET", "/xet-bridge-us/") == 1
        assert count(srv, "GET", "/v2/reconstructions/") == reconstructions + 1

        # Alice edits again: her agent's push dedups against Bob's basic upload.
        before = stored_bytes(srv)
        v3 = bytearray(v2)
        v3[7_000_000:7_000_100] = b"a" * 100
        (work / "model.bin").write_bytes(bytes(v3))
        alice.git("commit", "-qam", "alice's edit", cwd=work)
        alice.git("push", "-q", "origin", "main", cwd=work)
        assert stored_bytes(srv) - before < len(v3) // 10

        # And a plain `git lfs pull` for Bob, every version from a fresh clone for both.
        bob.git("pull", "-q", cwd=bob_work)
        assert (bob_work / "model.bin").read_bytes() == bytes(v3)
        for who, g in (("a2", alice), ("b2", bob)):
            g.git("clone", "-q", str(remote), who)
            for rev, data in (("HEAD", v3), ("HEAD~1", v2), ("HEAD~2", v1)):
                g.git("checkout", "-q", rev, cwd=g.root / who)
                assert (g.root / who / "model.bin").read_bytes() == bytes(data), (who, rev)
            assert "Git LFS fsck OK" in g.git("lfs", "fsck", cwd=g.root / who).stdout


def test_install_writes_the_keys_newer_git_lfs_reads_and_doctor_checks_them(tmp_path: Path, lfs_path: str) -> None:
    """git-lfs 3.7+ reads `lfs.customtransfer.xet.*` in lowercase only and uses an agent only for
    the operations it is registered for: install writes exactly those keys, doctor flags others."""
    g = make_git_env(tmp_path)
    g.env["PATH"] = lfs_path + g.env["PATH"]
    g.git_xet("install")
    config = (g.root / "home" / ".gitconfig").read_text()
    assert '[lfs "customtransfer.xet"]' in config and "direction = both" in config and "concurrent = true" in config
    assert g.git_xet("doctor", check=False).returncode == 0
    g.git("config", "--global", "lfs.customTransfer.xet.args", "transfer")  # a hand edit in another case
    g.git("config", "--global", "lfs.customtransfer.xet.direction", "upload")
    flagged = g.git_xet("doctor", check=False)
    assert flagged.returncode == 1
    assert "lfs.customTransfer.xet.args is not read by git-lfs 3.7" in flagged.stdout
    assert "git-lfs uses the agent only to upload" in flagged.stdout
    g.git("config", "--global", "--unset-all", "lfs.customTransfer.xet.args")
    g.git("config", "--global", "--unset-all", "lfs.customtransfer.xet.direction")
    g.git_xet("install")
    assert g.git_xet("doctor", check=False).returncode == 0
    g.git_xet("uninstall")
    assert "customtransfer" not in (g.root / "home" / ".gitconfig").read_text()


def test_prune_verifies_against_the_endpoint_for_stock_git_lfs(tmp_path: Path, lfs_path: str) -> None:
    """With stock git-lfs, git-lfs asks the endpoint itself: an object pushed without its LFS
    content is "missing on remote" and kept; once pushed (a basic PUT), prune verifies and deletes it."""
    from tests.integration.test_prune_verify import _object_file, _on_a_terminal, _unpushed_then_replaced

    with running_server(tmp_path / "srv" / "data") as srv:
        g = teammate(tmp_path / "bob", srv, lfs_path, agent=False)
        g.git("config", "--global", "lfs.url", f"{srv.url}/{REPO}.git/info/lfs")
        work, v1 = _unpushed_then_replaced(g, seed=46)
        kept = _object_file(work, v1)
        prune = _on_a_terminal(g, "git lfs prune --verify-remote", work)
        assert prune.returncode != 0 and "missing on remote" in prune.stdout, prune.stdout
        assert kept.exists()
        g.git("lfs", "push", "--all", "origin", cwd=work)
        assert count(srv, "PUT", "/info/lfs/basic/") >= 1
        assert "verified with remote" in g.git("lfs", "prune", "--verify-remote", cwd=work).stdout
        assert not kept.exists()


# ---------------------------------------------------------------- docs/teams.md, word for word


def _with_credentials(g: GitEnv, srv: RunningServer, token: str, cwd: Path) -> dict[str, str]:
    """docs/teams.md's credential block, run for `g` (the token stored with `git credential approve`)."""
    g.git("config", "--global", "--unset-all", "credential.helper", check=False)  # only what the page sets
    env = dict(g.env, XET_TOKEN=token)
    run_block("teams.md", "endpoint-credentials", {"https://xet.example.com": srv.url}, cwd=cwd, env=env)
    return env


def test_teams_page_plain_clone_by_an_agent_user_and_a_stock_teammate(tmp_path: Path) -> None:
    bare = tmp_path / "models.git"
    files = {"weights.bin": random_bytes(2_000_000, 47), "notes.bin": b"n" * 3000}
    with running_server(tmp_path / "srv" / "data") as srv:
        admin = teammate(tmp_path / "admin", srv, "", agent=True)
        work = admin.lfs_work_tree(files, remote=bare)
        env = _with_credentials(admin, srv, srv.token("write", repo=REPO), work)
        run_block("teams.md", "endpoint-setup", {"https://xet.example.com": srv.url}, cwd=work, env=env)
        assert count(srv, "POST", "/v1/xorbs") >= 1 and count(srv, "PUT", "/info/lfs/basic/") == 0  # the agent's push was XET

        mate = teammate(tmp_path / "mate", srv, "", agent=False)
        mate_env = _with_credentials(mate, srv, srv.token("read", repo=REPO), mate.root)
        run_block("teams.md", "endpoint-clone", {"git@github.com:acme/models.git": str(bare)}, cwd=mate.root, env=mate_env)
        for name, data in files.items():
            assert (mate.root / "models" / name).read_bytes() == data
        assert count(srv, "GET", "/xet-bridge-us/") == len(files)


def _old_lfs_server(root: Path) -> tuple[str, ThreadingHTTPServer, threading.Thread]:
    """bench/lfs_basic_server.py: a plain Git LFS server (basic transfers, objects as files)."""
    sys.path.insert(0, str(REPO_ROOT / "bench"))
    import lfs_basic_server

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), lfs_basic_server.make_handler(root, verify_sha256=True))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    return f"http://127.0.0.1:{httpd.server_address[1]}", httpd, thread


def test_teams_page_moves_a_repository_from_another_lfs_server(tmp_path: Path) -> None:
    """Real history on a plain LFS server (three versions of a file, by stock git-lfs), then the
    page's commands in an agent user's clone: every version arrives on our server, deduplicated
    across versions, and the agent's next push dedups against what moved."""
    bare = tmp_path / "models.git"
    old_url, httpd, thread = _old_lfs_server(tmp_path / "old")
    try:
        with running_server(tmp_path / "srv" / "data") as srv:
            author = teammate(tmp_path / "author", srv, "", agent=False)
            versions = [random_bytes(6_000_000, 48)]
            for i in (1, 2):
                edited = bytearray(versions[-1])
                edited[1_000_000 * (2 * i) : 1_000_000 * (2 * i) + 64] = bytes([i]) * 64
                versions.append(bytes(edited))
            work = author.lfs_work_tree({"model.bin": versions[0]}, remote=bare)
            author.git("config", "--file", ".lfsconfig", "lfs.url", f"{old_url}/acme/models.git/info/lfs", cwd=work)
            author.git("add", ".lfsconfig", cwd=work)
            author.git("commit", "-qm", "the old LFS server", cwd=work)
            for data in versions[1:]:
                (work / "model.bin").write_bytes(data)
                author.git("commit", "-qam", "next version", cwd=work)
            author.git("push", "-q", "origin", "main", cwd=work)

            mover = teammate(tmp_path / "mover", srv, "", agent=True)
            mover.git("clone", "-q", str(bare), "models")
            clone = mover.root / "models"
            env = _with_credentials(mover, srv, srv.token("write", repo=REPO), clone)
            run_block("teams.md", "endpoint-migrate", {"https://xet.example.com": srv.url}, cwd=clone, env=env)
            moved = stored_bytes(srv)
            assert moved < 1.2 * len(versions[0]), f"{moved} bytes stored for 3 versions of {len(versions[0])}"

            httpd.shutdown()  # from here on, only our server has the objects
            reader = teammate(tmp_path / "reader", srv, "", agent=False)
            reader.git("clone", "-q", str(bare), "check")
            check = reader.root / "check"
            assert (check / "model.bin").read_bytes() == versions[-1]
            reader.git("lfs", "fetch", "--all", "origin", cwd=check)
            for data in versions:
                oid = hashlib.sha256(data).hexdigest()
                assert (check / ".git" / "lfs" / "objects" / oid[:2] / oid[2:4] / oid).read_bytes() == data

            v4 = bytearray(versions[-1])
            v4[5_000_000:5_000_064] = b"4" * 64
            (clone / "model.bin").write_bytes(bytes(v4))
            mover.git("commit", "-qam", "v4", cwd=clone)
            mover.git("push", "-q", "origin", "main", cwd=clone)
            assert stored_bytes(srv) - moved < len(v4) // 10
    finally:
        httpd.shutdown()  # (a second call returns at once)
        httpd.server_close()
        thread.join(timeout=10)


def test_a_scoped_mode_clone_moves_with_one_command(tmp_path: Path) -> None:
    """A clone set up the older way (`install --local --standalone URL --remote origin`, objects
    pushed standalone with a token for REPO) runs `git xet setup-repo`: its scoped keys go, and a
    stock teammate's plain clone gets the objects pushed before the move."""
    bare = tmp_path / "models.git"
    data = random_bytes(1_500_000, 49)
    with running_server(tmp_path / "srv" / "data") as srv:
        old = teammate(tmp_path / "old", srv, "", agent=True)
        work = old.lfs_work_tree({"model.bin": data}, remote=bare)
        old.git_xet("install", "--local", "--standalone", srv.url, "--remote", "origin", cwd=work)
        old.git("config", "--global", "xet.token", srv.token("write", repo=REPO))
        old.git("push", "-q", "origin", "main", cwd=work)
        assert ".git-xet.invalid" in old.git("config", "--local", "--list", cwd=work).stdout

        moved = old.git_xet("setup-repo", f"{srv.url}/{REPO}", cwd=work).stdout
        assert "removed the scoped-mode key remote.origin.lfsurl" in moved
        assert ".git-xet.invalid" not in old.git("config", "--local", "--list", cwd=work).stdout
        old.git("commit", "-qm", "move to the LFS endpoint", cwd=work)
        old.git("push", "-q", "origin", "main", cwd=work)

        mate = teammate(tmp_path / "mate", srv, "", agent=False)
        mate.git("clone", "-q", str(bare), "plain")
        assert (mate.root / "plain" / "model.bin").read_bytes() == data


# ---------------------------------------------------------------- replicas: PostgreSQL + S3


def test_both_client_kinds_through_tls_two_replicas_s3_and_postgres(tmp_path: Path, seaweed: RunningS3, postgres: Postgres) -> None:
    """The scale-out deployment (nginx TLS, two replicas, objects in S3, index in PostgreSQL):
    a stock teammate's basic push is stored as XET in the bucket and registered in the shared
    index, an agent user's plain clone reconstructs it natively, the agent's edit dedups against
    it, and the stock teammate pulls the edit (and resumes a range) through the bridge."""
    with running_deployment(tmp_path / "deployment", seaweed, postgres) as d:
        bare = tmp_path / "models.git"
        url = f"{d.nginx.url}/{REPO}.git/info/lfs"

        def client(name: str, agent: bool) -> GitEnv:
            g = make_git_env(tmp_path / name)
            g.env.update(SSL_CERT_FILE=str(d.nginx.cert), GIT_SSL_CAINFO=str(d.nginx.cert))
            g.git("lfs", "install", "--skip-repo")
            if agent:
                g.git_xet("install")
            g.git("config", "--global", "http.sslCAInfo", str(d.nginx.cert))
            g.use_credentials(d.token("write", repo=REPO))
            return g

        bob = client("bob", agent=False)
        v1 = random_bytes(5_000_000, 50)
        work = bob.lfs_work_tree({"model.bin": v1}, remote=bare)
        bob.git("config", "--file", ".lfsconfig", "lfs.url", url, cwd=work)
        bob.git("add", ".lfsconfig", cwd=work)
        bob.git("commit", "-qm", "endpoint", cwd=work)
        bob.git("push", "-q", "origin", "main", cwd=work)
        assert f"PUT /{REPO}.git/info/lfs/basic/" in d.nginx.access_log()
        store = d.store()
        try:
            assert store.file_by_sha256(hashlib.sha256(v1).hexdigest(), REPO) is not None
        finally:
            store.close()
        in_bucket = sum(size for _, size, _ in d.objects().list_entries("xorbs/"))
        assert in_bucket >= len(v1) * 0.95

        alice = client("alice", agent=True)
        alice.git("clone", "-q", str(bare), "a")
        assert (alice.root / "a" / "model.bin").read_bytes() == v1
        v2 = bytearray(v1)
        v2[2_500_000:2_500_064] = b"a" * 64
        (alice.root / "a" / "model.bin").write_bytes(bytes(v2))
        alice.git("commit", "-qam", "alice", cwd=alice.root / "a")
        alice.git("push", "-q", "origin", "main", cwd=alice.root / "a")
        assert sum(size for _, size, _ in d.objects().list_entries("xorbs/")) - in_bucket < len(v2) // 10

        bob.git("pull", "-q", cwd=work)
        assert (work / "model.bin").read_bytes() == bytes(v2)
        assert "/xet-bridge-us/" in d.nginx.access_log()
