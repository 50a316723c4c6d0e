"""The docs' commands, run word for word (tests/support/docs_blocks.py): the user guide's first
push and clone against a directory store and against `git xet serve`, the Teams page in a new
teammate's order, a new server secret, and the move of a server's index to PostgreSQL with the
tokens minted before it still working. Each block runs as the page shows it, with only the
documented placeholders (paths, URLs) replaced by what the test set up."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import tempfile
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


from tests.support.datagen import random_bytes
from tests.support.docs_blocks import ROOT, block, run_block, substitute
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.postgres_process import Postgres
from tests.support.server_process import running_server
from tests.support.processes import stop_process, wait_for_health


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _with_pip_config(home: Path) -> None:
    """The installer runs pip under the test's HOME: give it the pip configuration (index,
    wheel cache) of whoever runs the tests, as their own HOME would."""
    for relative in (".config/pip/pip.conf", ".pip/pip.conf"):
        source = Path.home() / relative
        if source.is_file():
            (home / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, home / relative)


@contextmanager
def _server_from_block(page: str, name: str, mapping: dict[str, str], env: dict[str, str], log: Path) -> Iterator[str]:
    """Start the `git xet serve` command of a docs block (it runs until stopped); yield its URL
    once /health answers."""
    script = substitute(block(page, name).text, mapping)
    with open(log, "ab") as err:
        proc = subprocess.Popen(["bash", "-e", "-c", "exec " + script.strip()], stdout=subprocess.PIPE, stderr=err, env=env)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("http://"), f"docs/{page} {name!r} did not start: {log.read_text(errors='replace')[-2000:]}"
        wait_for_health(url, proc, lambda: log.read_text(errors="replace")[-2000:])
        yield url
    finally:
        stop_process(proc)


def _clone_and_compare(genv: GitEnv, remote: Path, expected: dict[str, bytes], where: str) -> None:
    genv.git("clone", "-q", str(remote), where)
    for name, data in expected.items():
        assert (genv.root / where / name).read_bytes() == data


# ---------------------------------------------------------------- user guide


def test_user_guide_install_push_and_clone_with_a_directory_store(tmp_path: Path) -> None:
    """As the guide says: the installer with a directory store (for one user from this root
    shell: GIT_XET_HOME and BIN_DIR, as the page documents), a first push, a clone that gets the
    file back; the objects are in the store the installer made."""
    genv = make_git_env(tmp_path)
    home = Path(genv.env["HOME"])
    _with_pip_config(home)
    env = dict(genv.env)
    env.update(GIT_XET_HOME=str(home / ".local/share/git-xet"), BIN_DIR=str(home / ".local/bin"))
    env["PATH"] = f"{home / '.local/bin'}{os.pathsep}{env['PATH']}"
    run_block("user-guide.md", "install-directory-store", cwd=ROOT, env=env, timeout=900)
    assert (home / ".local/bin/git-xet").resolve().is_relative_to(home / ".local/share/git-xet/venv")
    assert (home / "xet-store").is_dir()

    work = tmp_path / "work"
    work.mkdir()
    pushed = run_block("user-guide.md", "first-push", {"/srv/git": str(tmp_path / "git")}, cwd=work, env=env)
    assert "uploaded 1 file" in pushed.stdout
    assert any(p.is_file() for p in (home / "xet-store").rglob("*") if "xorb" in p.as_posix() or p.suffix == ".sqlite")
    run_block("user-guide.md", "first-clone", {"/srv/git": str(tmp_path / "git")}, cwd=work, env=env)
    pointer = subprocess.run(["git", "show", "HEAD:model.safetensors"], cwd=work / "models-copy", env=env, capture_output=True, text=True, check=True)
    assert pointer.stdout.startswith("version https://git-lfs.github.com/spec/v1")  # it went through LFS


def test_user_guide_push_and_clone_through_a_server(tmp_path: Path) -> None:
    """The guide's server set-up: the token lands in a 0600 file included from ~/.gitconfig
    (which never holds it), doctor passes, and the same push and clone go through the server."""
    genv = make_git_env(tmp_path / "user")
    with running_server(tmp_path / "srv" / "data") as srv:
        env = dict(genv.env, XET_TOKEN=srv.token())
        run_block("user-guide.md", "use-a-server", {"https://xet.example.com": srv.url}, cwd=genv.root, env=env)
        home = Path(env["HOME"])
        credentials = home / ".git-xet-credentials"
        assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
        assert env["XET_TOKEN"] in credentials.read_text()
        assert env["XET_TOKEN"] not in (home / ".gitconfig").read_text()

        work = genv.root / "work"
        work.mkdir()
        run_block("user-guide.md", "first-push", {"/srv/git": str(genv.root / "git")}, cwd=work, env=env)
        run_block("user-guide.md", "first-clone", {"/srv/git": str(genv.root / "git")}, cwd=work, env=env)
        assert "/v1/shards" in srv.log() or "upload-bundles" in srv.log()  # the push went to the server


# ---------------------------------------------------------------- teams


def test_teams_page_in_a_new_teammates_order(tmp_path: Path) -> None:
    """Whoever sets the repository up and a new teammate follow the page. The teammate's clone
    before the token fails (what the page used to say first); token first, it checks out."""
    bare = tmp_path / "models.git"
    files = {"weights.bin": random_bytes(300_000, seed=43)}
    with running_server(tmp_path / "srv" / "data") as srv:
        token = srv.token()
        url = {"https://xet.example.com": srv.url}
        admin = make_git_env(tmp_path / "admin")
        admin.git_xet("install", "--global")  # git-xet installed, as install/install.sh leaves it
        work = admin.lfs_work_tree(files, remote=bare)
        admin_env = dict(admin.env, XET_TOKEN=token)
        run_block("teams.md", "teams-token", url, cwd=work, env=admin_env)
        run_block("teams.md", "teams-setup", url, cwd=work, env=admin_env)

        mate = make_git_env(tmp_path / "mate")
        mate.git_xet("install", "--global")
        mate_env = dict(mate.env, XET_TOKEN=token)
        repo = {"git@github.com:acme/models.git": str(bare)}
        early = run_block("teams.md", "teams-clone", repo, cwd=mate.root, env=mate_env, check=False)
        assert early.returncode != 0 and "token" in (early.stdout + early.stderr)
        shutil.rmtree(mate.root / "models", ignore_errors=True)

        run_block("teams.md", "teams-token", url, cwd=mate.root, env=mate_env)
        run_block("teams.md", "teams-clone", repo, cwd=mate.root, env=mate_env)
        assert (mate.root / "models" / "weights.bin").read_bytes() == files["weights.bin"]


def test_teams_users_credentials_and_locks(tmp_path: Path) -> None:
    """The page's users, credential store and file locks, with real git-lfs: the operator mints
    the three tokens; alice and bob store theirs with `git credential approve`; alice commits the
    endpoint and lockable files; bob's plain clone checks them out read-only; alice locks one,
    bob's push over it is refused until carol, the admin, forces the unlock."""
    bare = tmp_path / "models.git"
    with running_server(tmp_path / "srv" / "data") as srv:
        url = {"https://xet.example.com": srv.url}
        operator = make_git_env(tmp_path / "operator")
        minted = run_block("teams.md", "teams-users", {"/srv/xet": str(srv.data_dir)}, cwd=operator.root, env=operator.env)
        tokens = dict(zip(("alice", "bob", "carol"), minted.stdout.split(), strict=True))

        def teammate(name: str) -> GitEnv:
            g = make_git_env(tmp_path / name)
            g.git_xet("install")
            g.env.update(USER=name, XET_TOKEN=tokens[name])
            run_block("teams.md", "teams-credential", url, cwd=g.root, env=g.env)
            del g.env["XET_TOKEN"]  # from here on, git's credential store is all git-lfs has
            assert tokens[name] in (g.root / "home" / ".git-credentials").read_text()
            return g

        alice, bob, carol = (teammate(n) for n in ("alice", "bob", "carol"))
        alice.git("init", "-q", "--bare", str(bare))
        alice.git("clone", "-q", str(bare), "models")
        work = alice.root / "models"
        hero = random_bytes(50_000, seed=44)
        run_block("teams.md", "teams-lockable", url, cwd=work, env=alice.env)
        (work / "art").mkdir()
        (work / "art" / "hero.psd").write_bytes(hero)
        alice.git("add", "art", cwd=work)
        alice.git("commit", "-qm", "hero", cwd=work)
        alice.git("push", "-q", "origin", "HEAD", cwd=work)

        bob.git("clone", "-q", str(bare), "models")  # a plain clone: the endpoint is committed
        theirs = bob.root / "models" / "art" / "hero.psd"
        assert theirs.read_bytes() == hero and not theirs.stat().st_mode & 0o222  # mode bits: root may write anything

        listed = run_block("teams.md", "teams-locks", cwd=work, env=alice.env)
        assert "art/hero.psd" in listed.stdout and "alice" in listed.stdout
        os.chmod(theirs, 0o644)
        theirs.write_bytes(random_bytes(1000, seed=45))
        bob.git("commit", "-qam", "bob's edit", cwd=theirs.parent.parent)
        refused = bob.git("push", "origin", "HEAD", cwd=theirs.parent.parent, check=False)
        assert refused.returncode != 0 and "Cannot update locked files" in refused.stdout + refused.stderr
        assert bob.git("lfs", "unlock", "--force", "art/hero.psd", cwd=theirs.parent.parent, check=False).returncode != 0

        carol.git("clone", "-q", str(bare), "models")
        carol.git("lfs", "unlock", "--force", "art/hero.psd", cwd=carol.root / "models")
        bob.git("push", "-q", "origin", "HEAD", cwd=theirs.parent.parent)


# ---------------------------------------------------------------- secrets


def test_a_new_secret_is_private_and_an_open_one_is_reported(tmp_path: Path) -> None:
    """The page's secret is created 0600 and the server accepts it; a secret file others can
    read is reported by name with the chmod to run (the server still starts: it may be a
    mounted secret it does not own)."""
    etc = tmp_path / "etc"
    run_block("server.md", "new-secret", {"/etc/git-xet": str(etc)}, cwd=tmp_path, env=dict(os.environ))
    secret = etc / "secret"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and stat.S_IMODE(etc.stat().st_mode) == 0o700
    minted = subprocess.run([sys.executable, "-m", "git_xet", "token", "--secret-file", str(secret), "--scope", "read"], capture_output=True, text=True, timeout=60, check=False)
    assert minted.returncode == 0 and "other users" not in minted.stderr

    secret.chmod(0o644)
    minted = subprocess.run([sys.executable, "-m", "git_xet", "token", "--secret-file", str(secret), "--scope", "read"], capture_output=True, text=True, timeout=60, check=False)
    assert minted.returncode == 0
    assert f"chmod 600 {secret}" in minted.stderr
    assert secret.read_text().strip() not in minted.stderr


# ---------------------------------------------------------------- PostgreSQL


def test_moving_a_server_to_postgresql_keeps_its_tokens(tmp_path: Path, postgres: Postgres) -> None:
    """A server on --data alone, a token minted and a file pushed; then the operations page's
    steps word for word (role, database, copy-index, fsck, serve with --secret-file DATA/secret):
    the old token clones the old file and pushes a new one. Started without the secret, the
    server refuses and names that file (where it used to suggest a new secret)."""
    data = tmp_path / "srv" / "data"
    genv = make_git_env(tmp_path / "user")
    before = {"old.bin": random_bytes(200_000, seed=4)}
    with running_server(data) as srv:
        token = srv.token()
        genv.git_xet("install", "--global", "--standalone", srv.url)
        genv.git("config", "--global", "xet.token", token)
        work = genv.lfs_work_tree(before)
        genv.git("push", "-q", "origin", "HEAD", cwd=work)

    index_url = f"postgresql://git_xet@127.0.0.1:{postgres.port}/git_xet"
    superuser = dict(genv.env, PGHOST="127.0.0.1", PGPORT=str(postgres.port), PGUSER="xet")
    moved = {"/srv/xet": str(data), "postgresql://git_xet@db.internal/git_xet": index_url}
    run_block("operations.md", "pg-move", moved, cwd=tmp_path, env=superuser)

    refused = subprocess.run(
        [sys.executable, "-m", "git_xet", "serve", "--data", str(data), "--index", index_url, "--port", "0"],
        capture_output=True, text=True, timeout=60, check=False, env=genv.env,
    )  # fmt: skip
    assert refused.returncode != 0
    assert f"--secret-file {data / 'secret'}" in refused.stderr and "openssl" not in refused.stderr

    port = _free_port()
    serving = {**moved, "--port 8080": f"--port {port}", "https://xet.example.com": f"http://127.0.0.1:{port}"}
    with _server_from_block("operations.md", "pg-serve", serving, genv.env, tmp_path / "pg-server.log") as url:
        genv.git_xet("install", "--global", "--standalone", url)  # the same token, the new address
        _clone_and_compare(genv, tmp_path / "user" / "remote.git", before, "after-move")
        (genv.root / "after-move" / "new.bin").write_bytes(random_bytes(100_000, seed=5))
        genv.git("add", "new.bin", cwd=genv.root / "after-move")
        genv.git("commit", "-qm", "after the move", cwd=genv.root / "after-move")
        genv.git("push", "-q", "origin", "HEAD", cwd=genv.root / "after-move")


# ---------------------------------------------------------------- production service

SERVICE_USER = "git-xet"  # the user the page's unit runs as


def _remove_service_user() -> None:
    if subprocess.run(["id", "-u", SERVICE_USER], capture_output=True, check=False).returncode == 0:
        subprocess.run(["userdel", SERVICE_USER], capture_output=True, check=True, timeout=60)


def _exec_start(unit: str) -> list[str]:
    """The unit's ExecStart command (continuation lines joined), split as systemd does."""
    import shlex

    joined = unit.replace("\\\n", " ")
    [line] = [ln for ln in joined.splitlines() if ln.startswith("ExecStart=")]
    return shlex.split(line.removeprefix("ExecStart="))


def test_production_service_as_the_page_sets_it_up(tmp_path: Path) -> None:
    """Install as root (the page's command) into a prefix, then the page's service user and data
    directory, then the unit's ExecStart run as that user with its UMask: the server answers
    /health, makes its secret 0600 and the user's own, a token minted the page's way pushes,
    and a clone gets the file back. The virtualenv's Python is one the service user can run
    even where root's PATH starts with a private one (pyenv under /root here)."""
    assert os.geteuid() == 0, "installs system-wide and creates a service user: run as root (install/test.sh does)"
    prefix = Path(tempfile.mkdtemp(prefix="git-xet-service-", dir="/tmp"))
    prefix.chmod(0o755)  # as /opt and /srv are: the service user must reach its files
    opt, data, bindir = prefix / "opt", prefix / "srv-xet", prefix / "bin"
    root_env = make_git_env(tmp_path / "root")
    _with_pip_config(Path(root_env.env["HOME"]))
    install_env = dict(root_env.env, GIT_XET_HOME=str(opt), BIN_DIR=str(bindir))
    install_env["PATH"] = os.pathsep.join(p for p in install_env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))  # no .venv of the checkout
    _remove_service_user()
    proc: subprocess.Popen[bytes] | None = None
    try:
        run_block("server.md", "install-system", cwd=ROOT, env=install_env, timeout=900)
        run_block("server.md", "service-user", {"/srv/xet": str(data)}, cwd=tmp_path, env=dict(os.environ))
        assert stat.S_IMODE(data.stat().st_mode) == 0o700

        port = _free_port()
        unit = substitute(
            block("server.md", "systemd-unit").text,
            {"/opt/git-xet": str(opt), "/srv/xet": str(data), "--port 8080": f"--port {port}", "https://xet.example.com": f"http://127.0.0.1:{port}"},
        )
        assert f"User={SERVICE_USER}" in unit and "UMask=0077" in unit
        service_env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}  # systemd's, no HOME
        log = tmp_path / "service.log"
        with open(log, "ab") as err:
            proc = subprocess.Popen(
                ["runuser", "-u", SERVICE_USER, "--", *_exec_start(unit)],  # not setpriv: it keeps root's capabilities
                stdout=subprocess.PIPE, stderr=err, env=service_env, cwd="/", preexec_fn=lambda: os.umask(0o077),
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        wait_for_health(url, proc, lambda: log.read_text(errors="replace")[-3000:], timeout=60)
        secret = data / "secret"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        assert secret.stat().st_uid == int(subprocess.run(["id", "-u", SERVICE_USER], capture_output=True, text=True, check=True).stdout)

        token = run_block("server.md", "service-token", {"/opt/git-xet": str(opt), "/srv/xet": str(data)}, cwd=tmp_path, env=dict(os.environ)).stdout.strip()
        user = make_git_env(tmp_path / "user")
        user.git_xet("install", "--global", "--standalone", url)
        user.git("config", "--global", "xet.token", token)
        files = {"model.bin": random_bytes(400_000, seed=6)}
        work = user.lfs_work_tree(files)
        user.git("push", "-q", "origin", "HEAD", cwd=work)
        _clone_and_compare(user, user.root / "remote.git", files, "copy")
    finally:
        if proc is not None:
            stop_process(proc, grace=30)
        _remove_service_user()
        shutil.rmtree(prefix, ignore_errors=True)


# ---------------------------------------------------------------- files that deduplicate well


def test_rewriting_parquet_with_cdc_keeps_the_table_and_makes_an_insert_cheap(tmp_path: Path) -> None:
    """The user guide's block rewrites a plain Parquet file with content-defined chunking: the
    table reads back the same, and a version with rows inserted (written the same way) shares
    far more of its chunks with it than the plain writer's two versions share."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from git_xet.pipelines.file_hashing import hash_bytes
    from tests.support.real_shaped import parquet_versions

    plain = parquet_versions(False, 4.0)  # ~7 MB: large enough that a page per column is a small part
    (tmp_path / "data.parquet").write_bytes(plain[0].data)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    run_block("user-guide.md", "parquet-cdc", cwd=tmp_path, env=env)
    rewritten = (tmp_path / "data.parquet").read_bytes()
    assert pq.read_table(pa.BufferReader(rewritten)).equals(pq.read_table(pa.BufferReader(plain[0].data)))

    def shared(old: bytes, new: bytes) -> float:
        known = set(hash_bytes(old).chunk_hashes)
        digest = hash_bytes(new)
        return sum(n for h, n in zip(digest.chunk_hashes, digest.chunk_sizes) if h in known) / len(new)

    inserted = pq.read_table(pa.BufferReader(plain[2].data))  # parquet_versions' "insert"
    sink = pa.BufferOutputStream()
    pq.write_table(inserted, sink, use_content_defined_chunking=True)
    assert shared(rewritten, sink.getvalue().to_pybytes()) > shared(plain[0].data, plain[2].data) + 0.2
