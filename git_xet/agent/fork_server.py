"""The fork server's side of handover.py (what the two say to each other: handover_wire.py): a
process forked from the first agent of a git-lfs command, which imports the transfer code once and forks a worker for each agent that hands
itself over. It holds no thread, connection or open database when it forks (`prepare` only
imports and reads configuration), so each worker starts as a clean copy.
"""

from __future__ import annotations

import array
import gc
import marshal
import os
import signal
import socket
import sys
import threading
import traceback
from typing import TYPE_CHECKING, NoReturn

from ..platform.local_sockets import peer_uid
from ..platform.parent_death import die_with_parent
from .handover_wire import FORMAT, GO, HANDOVER_WAIT, IDLE_EXIT, MAX_REQUEST, READY, REFUSED, STARTED, STATUS, STDIO, identity
from .lineage import adopt
from .protocol import Init
from .stdio import InputLines, ProtocolOut

if TYPE_CHECKING:
    import _socket

    from .handover_wire import Prepare, Serve


def _stop(signum: int, frame: object) -> NoReturn:
    """SIGTERM from the agent that forked the server: it is done. SystemExit, not an Exception,
    so that nothing catching those (around `prepare`) swallows it; run_server's `finally` still
    waits for the workers."""
    raise SystemExit(0)


def run_server(listener: _socket.socket, agent: int, init: Init, out: ProtocolOut, serve: Serve, prepare: Prepare) -> None:
    """Fork workers for the agents that ask on `listener` and are the agent's (pid `agent`)
    equals, until that agent sends SIGTERM or IDLE_EXIT seconds pass without a request; then
    wait for every worker (so their CPU time is accounted to the command, as an agent's is)."""
    die_with_parent(agent, signal.SIGKILL)
    own = identity(init)
    out.close()  # the agent's stdout, stdin and stderr are its own: git-lfs must see them close
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    signal.signal(signal.SIGTERM, _stop)
    server = socket.socket(fileno=listener.detach())
    try:
        try:
            prepare(init.operation)
        except Exception:  # noqa: BLE001 -- each worker meets the same failure with its first object, and reports it
            pass
        gc.freeze()  # workers' collections never traverse (and so never copy) what they inherit
        server.settimeout(IDLE_EXIT)
        while True:
            try:
                conn, _ = server.accept()
            except TimeoutError:
                return
            with conn:
                _answer(conn, server, own, init.remote, serve)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server.close()
        _wait_for_workers()


def _wait_for_workers() -> None:
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _answer(conn: socket.socket, server: socket.socket, own: tuple, remote: str | None, serve: Serve) -> None:
    """One agent's request: refuse it, or fork its worker once the agent commits."""
    conn.settimeout(HANDOVER_WAIT)
    fds: list[int] = []
    try:
        if peer_uid(conn) != os.getuid():
            return
        message, ancillary, _flags, _address = conn.recvmsg(MAX_REQUEST, socket.CMSG_SPACE(STDIO.size))
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.extend(array.array("i", data[: len(data) - len(data) % 4]))
        request = _request(message)
        if request is None or len(fds) != 3 or request[1] != own:
            conn.sendall(REFUSED)
            return
        conn.sendall(READY)
        if conn.recv(16) != GO:  # the agent gave up waiting: it serves itself
            return
        if os.fork() == 0:
            _work(conn, server, fds, request[2], request[3], remote, serve, request[4])
    except OSError:
        return
    finally:
        for fd in fds:
            os.close(fd)


def _request(message: bytes) -> tuple | None:
    """(format, identity, git-lfs id, unread input, the oid whose first byte the agent reported),
    or None for anything else."""
    try:
        request = marshal.loads(message)
    except (EOFError, ValueError, TypeError):
        return None
    if not (isinstance(request, tuple) and len(request) == 5 and request[0] == FORMAT):
        return None
    if not (isinstance(request[2], str) and isinstance(request[3], bytes) and isinstance(request[4], str)):
        return None
    return request


def _work(conn: socket.socket, server: socket.socket, fds: list[int], lfs_process: str, pending: bytes, remote: str | None, serve: Serve, shown: str) -> NoReturn:
    """The worker: the agent's descriptors become ours, and we serve its objects."""
    status = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        server.close()  # so the name is free once the server exits
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        conn.settimeout(None)  # the agent lives as long as its objects take
        conn.sendall(STARTED)
        threading.Thread(target=_exit_with_agent, args=(conn,), daemon=True).start()
        adopt(lfs_process)
        status = serve(InputLines(0, pending), ProtocolOut(), remote, shown)
    except BaseException:  # noqa: BLE001 -- whatever ends the worker, the agent hears its status
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        try:
            conn.sendall(STATUS + bytes([status & 0xFF]))
        except OSError:
            pass
        os._exit(status)


def _exit_with_agent(conn: socket.socket) -> None:
    """Exit when the agent does: its end of the connection closes (git-lfs killed it)."""
    try:
        conn.recv(1)
    except OSError:
        pass
    os._exit(1)
