"""Several server processes on one listening socket (`git xet serve --workers N`).

One server process runs its Python on one core at a time (the interpreter lock), and a push of
many small files through it is bound by that: each file is a request, and each request is a few
milliseconds of Python. Worker processes, each with its own interpreter, serve requests from the
same socket (the kernel hands each new connection to one of them), sharing the data directory
and the index as replicas do (SQLite's and the object store's writers already coordinate across
processes: the agents of a local store are such processes).

One process serves by default (DEFAULT_WORKERS): then the server's upload streams, grant
limits (grant_limits) and metrics are all in that process, exact, and a large file's sha256 is
always hashed while its xorbs arrive. `--workers N` is for pushes of many small files on a
machine with cores to spare (1000 files: 2.11 s with two, 2.53 s with one on the 2-core
reference machine, bench/HISTORY.md), at a cost: a large file's xorbs land in either worker and
only the shard's worker's own upload stream shortens its sha256, each worker counts grants on its
own, and the metrics go through a multiprocess directory. To scale further, run replicas on one
shared index (docs/server.md).

Why not uvicorn's own supervisor (`workers=N`): it starts workers with `spawn`, each rebuilding
the app from an import string and unpickling its config (our protocol class, made per limits,
does not pickle), and it restarts a worker that died instead of letting the server exit.

The parent only supervises: it forwards SIGTERM and SIGINT to the workers and waits for them.
A worker that exits on its own (a crash, the out-of-memory killer) stops the others, and the
parent exits non-zero, so a service manager notices and restarts the server, rather than the
server running on with fewer workers unseen. A worker dies with its parent (Linux
PR_SET_PDEATHSIG), so a killed parent does not leave workers holding the port and the data
directory's lock.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable

from ..platform.parent_death import die_with_parent

log = logging.getLogger("git_xet.server")

DEFAULT_WORKERS = 1


def run_workers(count: int, serve_one: Callable[[], None], after_fork: Callable[[], None] | None = None) -> int:
    """Fork `count` workers that each call serve_one() (which serves until SIGTERM), run
    after_fork() here, wait for all of them, and return this server's exit status: 0 if they
    stopped because we were asked to stop, 1 if one of them exited on its own."""
    if not hasattr(os, "fork"):
        raise OSError(f"--workers {count} needs fork(), which {sys.platform} lacks: serve with one worker, and run replicas on one index to scale")
    parent = os.getpid()
    workers: set[int] = set()
    for _ in range(count):
        pid = os.fork()
        if pid == 0:
            os._exit(_worker(parent, serve_one))
        workers.add(pid)
    if after_fork is not None:
        after_fork()
    stopping = False

    def stop(signum: int = signal.SIGTERM, frame: object = None) -> None:
        nonlocal stopping
        stopping = True
        for pid in workers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    status = 0
    while workers:
        pid, wait_status = os.wait()
        workers.discard(pid)
        if not stopping:
            log.error("server worker %d exited (%s); stopping the others", pid, _describe(wait_status))
            status = 1
            stop()
    return status


def _worker(parent: int, serve_one: Callable[[], None]) -> int:
    """A worker's life: its exit status."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # uvicorn installs its own once serving
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    die_with_parent(parent)
    try:
        serve_one()
    except SystemExit as exc:  # uvicorn's way of failing to start
        return exc.code if isinstance(exc.code, int) else 1
    except Exception:
        log.exception("server worker %d failed", os.getpid())
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


def _describe(wait_status: int) -> str:
    if os.WIFSIGNALED(wait_status):
        return f"killed by signal {os.WTERMSIG(wait_status)}"
    return f"exit status {os.waitstatus_to_exitcode(wait_status)}"
