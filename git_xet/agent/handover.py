"""One start-up for all of a command's agents: a fork server imports the transfer code once,
and each agent's objects are served by a worker forked from it. This is the agents' side; the
server's is fork_server.py, and what both say to each other is handover_wire.py.

Why: git-lfs starts `lfs.concurrenttransfers` agents (8 by default) for each push or clone, one
after another, and sends none of them an object before all have answered `init`. Each agent
then imported the transfer stack and ran git twice before its first object: ~180 ms of CPU
each on a 2-core machine (`bench/per_object.py --objects 1`), eight times per command, before
anything moved. A worker forked from a process that did it once starts in a few milliseconds
and shares those pages.

How:
- Once `init` is answered, an agent binds an abstract socket named after its git-lfs process
  (lineage.py), its uid and the operation. (Installed as `git xet install` registers it, the
  agent is launch.sh: the shell answers `init` and starts Python with the first request, so
  only agents given an object get here, and the server's `prepare` runs after that request.)
  The agent that succeeds forks the fork server, which lets go of the agent's descriptors, runs
  `prepare` (imports, git's configuration) and accepts.
- Each agent (that one too) connects, checks that the server runs as its own uid, and sends its
  identity (environment, directory, command line, interpreter, `init`), its unread input, and
  its stdin, stdout and stderr. The server serves only an agent of its own uid whose identity
  is the one of the agent it was forked from, so the worker is what the agent would have been;
  and it forks only once the agent commits, so an agent that gave up waiting never shares its
  stdin with a worker.
- The worker takes the descriptors, adopts the agent's git-lfs id, serves (transfer.serve) and
  sends its exit status, which the agent exits with. It dies with the agent (git-lfs kills an
  agent that outlives `terminate` by 30 s).
- An agent that finds no server, is refused, or waits past HANDOVER_WAIT serves its objects
  itself, as it always did. The server stops when the agent that forked it is done (that agent
  then waits for it, and it for its workers), dies with it if it is killed, and stops taking
  requests after IDLE_EXIT seconds without one.
Linux only (platform/local_sockets.py: abstract sockets, SO_PEERCRED, fork); elsewhere, with
GIT_XET_PORTABLE=1 or GIT_XET_FORK_SERVER=0, or with no git-lfs process above the agent, each
agent serves itself.

The agent's side imports only C modules (_socket, marshal, _struct): socket.py would import
enum, ~10 ms per agent.
"""

from __future__ import annotations

import _socket
import marshal
import os

from ..platform import local_sockets
from .handover_wire import FORMAT, GO, HANDOVER_WAIT, READY, STARTED, STATUS, STDIO, identity
from .lineage import lfs_process_id

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms per agent start
if TYPE_CHECKING:
    from .handover_wire import Prepare, Serve
    from .protocol import Init
    from .stdio import InputLines, ProtocolOut


WORKER_LOST = -1  # _handed: the worker ended without sending its status (this agent exits 1)


def address(lfs_process: str, operation: str) -> bytes:
    return local_sockets.address(f"{lfs_process}/{operation}")


def serve_handed_over(init: Init, lines: InputLines, out: ProtocolOut, serve: Serve, prepare: Prepare, shown: str = "") -> int:
    """Serve this agent's objects: by a worker of this command's fork server (started here if
    no agent has started it) when one takes them, else here, with `serve`. The exit status.
    `shown`: the first request's oid, when this agent reported its first byte (serve's)."""
    if not local_sockets.available() or os.environ.get("GIT_XET_FORK_SERVER") == "0":
        return serve(lines, out, init.remote, shown)
    lfs_process = lfs_process_id()
    if lfs_process is None:
        return serve(lines, out, init.remote, shown)
    where = address(lfs_process, init.operation)
    server = _start_server(where, init, out, serve, prepare)
    status: int | None = None
    try:
        status = _handed(where, lfs_process, init, lines, out, shown)
        if status is None:
            return serve(lines, out, init.remote, shown)
        return 1 if status == WORKER_LOST else status
    finally:
        if server:  # only once this agent is done: the server's other workers may serve on
            # Not waiting for a server whose workers wait for git-lfs, which waits for this
            # agent's answer, when its worker was killed: this agent ends, git-lfs hears it.
            _stop_server(server, wait=status != WORKER_LOST)


def _start_server(where: bytes, init: Init, out: ProtocolOut, serve: Serve, prepare: Prepare) -> int | None:
    """Fork the server if no agent of this command has (the socket's name is free): its pid."""
    listener = local_sockets.seqpacket()
    try:
        listener.bind(where)
        listener.listen(64)
    except OSError:  # taken: another agent's server (or it cannot be had: each agent serves itself)
        listener.close()
        return None
    parent = os.getpid()
    pid = os.fork()  # the agent has no thread yet: nothing is forked mid-operation
    if pid == 0:
        try:
            from .fork_server import run_server

            run_server(listener, parent, init, out, serve, prepare)
        finally:
            os._exit(0)
    listener.close()
    return pid


def _stop_server(pid: int, wait: bool = True) -> None:
    """Tell the server this command is done, and wait for it: it waits for its workers, so
    their CPU time counts as this agent's children's (as an agent's own would)."""
    import signal

    try:
        os.kill(pid, signal.SIGTERM)
        if wait:
            os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _handed(where: bytes, lfs_process: str, init: Init, lines: InputLines, out: ProtocolOut, shown: str) -> int | None:
    """The exit status of the worker that served this agent (WORKER_LOST: it ended without
    one, killed); None if none did (nor read its stdin)."""
    conn = local_sockets.seqpacket()
    started = False
    try:
        conn.settimeout(HANDOVER_WAIT)
        conn.connect(where)
        if local_sockets.peer_uid(conn) != os.getuid():
            return None
        request = marshal.dumps((FORMAT, identity(init), lfs_process, lines.unread(), shown))
        conn.sendmsg([request], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, STDIO.pack(0, out.fileno(), 2))])
        if conn.recv(16) != READY:
            return None
        conn.sendall(GO)
        conn.settimeout(None)  # committed: the worker has our stdin now, or never will
        if conn.recv(16) != STARTED:  # no worker (the server died first): nothing was read
            return None
        started = True
        answer = conn.recv(16)
        return answer[1] if len(answer) == 2 and answer[:1] == STATUS else WORKER_LOST
    except OSError:  # before a worker started: no server, refused, gone, or too slow
        return WORKER_LOST if started else None
    finally:
        conn.close()
