"""Run the CAS server with uvicorn on a socket we bind ourselves (so --port 0 can report its port)."""

from __future__ import annotations

import ipaddress
import logging
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette

from ..platform.locks import lock_file
from ..storage.errors import StorageError
from ..storage.objects import DirectoryObjectStore
from .app import create_app
from .errors import SecretError
from .state import GrantMode, ServerConfig
from .http_guard import DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_HEADER_BYTES, guarded_protocol
from .http_io import DEFAULT_IDLE_TIMEOUT

DEFAULT_MAX_CONNECTIONS = 512
# How long a kept-alive connection may wait for its next request. Clients and proxies keep idle
# connections for about a minute (AWS load balancers 60 s, nginx 75 s, Node's undici as long as
# our Keep-Alive header says, hyper 90 s) and do not resend a POST written to a socket the
# server had closed meanwhile: at uvicorn's 5 s, huggingface.js lost the xorb POST it sent after
# chunking a large file with its event loop blocked. Outliving a proxy's own idle limit also
# means the proxy, not us, closes the connections it pools. Idle connections count against
# --max-connections, which keeps them bounded.
DEFAULT_KEEP_ALIVE_TIMEOUT = 75

log = logging.getLogger("git_xet.server")


def lock_data_dir(data_dir: Path) -> int | None:
    """Hold `<data>/server.lock` for the life of this process (returns its descriptor), or
    None when another server process holds it: two servers on one data directory would each
    think the other's half-written files abandoned."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(data_dir / "server.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        lock_file(fd, wait=False)
    except BlockingIOError:
        os.close(fd)
        return None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


@dataclass(frozen=True)
class Limits:
    """Per-connection limits (see http_guard and http_io for why each exists)."""

    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    keep_alive_timeout: int = DEFAULT_KEEP_ALIVE_TIMEOUT


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_bucket(url: str) -> str | None:
    """Why the --objects bucket cannot be used (None: it can), before we listen."""
    from ..storage.s3 import S3Error, open_s3_objects

    try:
        open_s3_objects(url).check()
    except (S3Error, ValueError) as exc:
        return f"--objects {url}: {getattr(exc, 'message', exc)}"
    return None


def serve(
    data_dir: Path,
    host: str,
    port: int,
    public_url: str | None,
    url_ttl: int,
    log_level: str,
    cas_token_ttl: int = 900,
    upload_grants: GrantMode = "auto",
    limits: Limits = Limits(),
    index_url: str | None = None,
    secret_file: Path | None = None,
    objects: str | None = None,
    workers: int | None = None,
) -> int:
    import uvicorn

    from .workers import DEFAULT_WORKERS, run_workers

    if workers is None:
        workers = DEFAULT_WORKERS

    if public_url is None and not is_loopback(host):
        # Without it, the Host header of each request would decide where clients are sent.
        print(
            f"git-xet serve: listening on {host} needs --public-url, the https URL clients reach this server at "
            "(usually through a TLS-terminating proxy); only loopback servers may take it from each request",
            file=sys.stderr,
        )
        return 2
    os.umask(0o077)  # the data directory is private: 0700 directories, 0600 files
    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO), format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    if not os.access(data_dir, os.W_OK):
        # A backup snapshot or a read-only share: served for reading (clones), every write
        # refused with the reason. Nobody can write it, so it needs no lock and no cleanup.
        log.warning("%s cannot be written here: serving it read-only (pushes are refused)", data_dir)
    elif index_url is None and lock_data_dir(data_dir) is None:
        # With its SQLite index a data directory has one server; with a shared index, replicas
        # share the objects directory (writes are atomic renames; temp-file cleanup takes the writers' lock).
        holder = (data_dir / "server.lock").read_text().strip() or "?"
        print(f"git-xet serve: {data_dir} is in use by another git-xet server (pid {holder}); stop it or use another --data", file=sys.stderr)
        return 1
    elif removed := DirectoryObjectStore(data_dir).remove_abandoned_temp_files():
        log.info("removed %d temp files left by an interrupted write", removed)
    if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        # Each worker's metrics go to files here, and a scrape of any worker sums them all
        # (metrics.py); a directory of our own, so no earlier run's files are counted.
        import atexit
        import shutil
        import tempfile

        metrics_dir = tempfile.mkdtemp(prefix="git-xet-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
        parent = os.getpid()

        def remove_metrics_dir() -> None:
            if os.getpid() == parent:  # the workers exit through os._exit, but say so anyway
                shutil.rmtree(metrics_dir, ignore_errors=True)

        atexit.register(remove_metrics_dir)
    if objects:
        problem = _check_bucket(objects)
        if problem:
            print(f"git-xet serve: {problem}", file=sys.stderr)
            return 1
    try:
        config = ServerConfig(data_dir, public_url, url_ttl, cas_token_ttl, upload_grants, limits.idle_timeout, index_url, secret_file, objects=objects)
        app = create_app(config)
    except (SecretError, StorageError) as exc:
        print(f"git-xet serve: {exc}", file=sys.stderr)
        return 1
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every keep-alive request after the first waited ~45 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        print(f"git-xet serve: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    # The first line on stdout is the URL, for scripts and tests that start us with --port 0.
    print(f"http://{shown}:{bound}", flush=True)

    def serve_with(app: Starlette) -> None:
        server_config = uvicorn.Config(
            app,
            log_level=log_level.lower(),
            access_log=False,
            timeout_graceful_shutdown=10,
            http=guarded_protocol(limits.header_timeout, limits.max_header_bytes),
            limit_concurrency=limits.max_connections,
            timeout_keep_alive=limits.keep_alive_timeout,
            # Said on every answer: undici keeps a connection as long as this says (else 4 s).
            headers=[("Keep-Alive", f"timeout={limits.keep_alive_timeout}")],
        )
        uvicorn.Server(server_config).run(sockets=[sock])

    if workers == 1:
        _collect_abandoned_uploads(app)
        serve_with(app)
        return 0
    app.state.cas.store.close()  # checked above; each worker opens its own connections after the fork
    # The collector's thread starts after the fork: a thread's locks must not be copied mid-use.
    return run_workers(workers, lambda: serve_with(create_app(config)), after_fork=lambda: _collect_abandoned_uploads(app))


def _collect_abandoned_uploads(app: Starlette) -> None:
    """Staged grant uploads in a bucket are collected by one thread per server (its supervisor
    when it has workers)."""
    bucket = app.state.cas.object_bucket
    if bucket is not None:
        from .grants import start_upload_collector

        start_upload_collector(bucket)
