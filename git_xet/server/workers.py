"""Several server processes on one listening socket (`git xet serve --workers N`).

One server process runs its Python on one core at a time (the interpreter lock), and a push of
many small files through it is bound by that: each file is a request, and each request is a few
milliseconds of Python. Worker processes, each with its own interpreter, serve requests from the
same socket (the kernel hands each new connection to one of them), sharing the data directory
and the index as replicas do (SQLite's and the object store's writers already coordinate across
processes: the agents of a local store are such processes).

By default there are DEFAULT_WORKERS (fewer on a machine with fewer cores): a push of 1000
small files took 1.89 s with two and 2.42 s with one on the 2-core reference machine
(`python bench/many_files.py --server-workers W`). A large file's xorbs then land in either
worker, and only the shard's worker's own upload stream (upload_streams) shortens its sha256.

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
from ..platform.switch import portable

log = logging.getLogger("git_xet.server")

DEFAULT_WORKERS = 2


def default_workers() -> int:
    """DEFAULT_WORKERS, or the cores this process may run on if fewer; 1 where there is no
    fork (Windows) or with GIT_XET_PORTABLE=1 (the accelerators off: one process serves)."""
    if not hasattr(os, "fork") or portable():
        return 1
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(DEFAULT_WORKERS, cores))


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
