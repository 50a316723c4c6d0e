"""A private PostgreSQL cluster for tests: initdb in a temp dir, the server on 127.0.0.1 on a
free port, stopped by PID.

PostgreSQL refuses to run as root, so as root the cluster belongs to `nobody` (the process is
started with that user; its directory is handed over to it). The binaries come from Debian's
`postgresql` package (install/services.sh installs it); without them the tests that need a
cluster fail with a message saying so, they are not skipped.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg

USER = "xet"  # the cluster's superuser (trust authentication, loopback only)


def _bindir() -> Path:
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(candidate, "postgres").exists():
            return Path(candidate)
    found = shutil.which("postgres")
    if found:
        return Path(found).parent
    raise RuntimeError("PostgreSQL is not installed: run `bash install/services.sh` as root (Debian: apt-get install postgresql)")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Postgres:
    """One running cluster. `url(db)` is a connection string for a database in it."""

    directory: Path
    port: int
    process: subprocess.Popen | None = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def start(self) -> None:
        """Start the server and wait (bounded) until it accepts connections."""
        as_root = os.geteuid() == 0
        with open(self.directory.parent / "postgres.log", "ab") as log:  # the server keeps its own copy of the fd
            self.process = subprocess.Popen(
                [str(_bindir() / "postgres"), "-D", str(self.directory), "-p", str(self.port), "-k", str(self.directory),
                 "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "max_connections=200"],
                stdout=log, stderr=log, user="nobody" if as_root else None, extra_groups=[] if as_root else None,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited: {(self.directory.parent / 'postgres.log').read_text(errors='replace')[-2000:]}")
            try:
                with psycopg.connect(self.url(), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                time.sleep(0.1)
        raise RuntimeError("postgres did not accept connections within 60 s")

    def stop(self, sig: int = signal.SIGINT) -> None:
        """Stop by PID (SIGINT: fast shutdown; SIGKILL: a crash), waiting a bounded time."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)
        if sig == signal.SIGKILL:
            # Its children (backends) notice the postmaster is gone and exit; wait for the lock.
            pid_file = self.directory / "postmaster.pid"
            deadline = time.monotonic() + 30
            while pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)


@contextmanager
def running_postgres() -> Iterator[Postgres]:
    """A fresh cluster in its own temp dir (pytest's are 0700 under root's: `nobody` could not
    reach them), stopped and removed afterwards."""
    bindir = _bindir()
    base = Path(tempfile.mkdtemp(prefix="git-xet-pg-"))
    directory = base / "cluster"
    as_root = os.geteuid() == 0
    if as_root:
        directory.mkdir()
        shutil.chown(directory, "nobody")
        os.chmod(base, 0o755)  # nobody must reach its cluster directory
    subprocess.run(
        [str(bindir / "initdb"), "-D", str(directory), "-U", USER, "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"],
        check=True, capture_output=True, timeout=120, user="nobody" if as_root else None, extra_groups=[] if as_root else None,
    )  # fmt: skip
    pg = Postgres(directory, _free_port())
    try:
        pg.start()
        yield pg
    finally:
        pg.stop()
        shutil.rmtree(base, ignore_errors=True)
