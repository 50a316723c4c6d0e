"""The agent's main loop: read requests on stdin, answer on (the guarded) stdout.

Nothing heavy is imported until the first object arrives: git-lfs starts
`lfs.concurrenttransfers` agents (8 by default) for every command, even for one file. As
`git xet install` registers it, the agent is launch.sh, which answers `init` itself and
starts this only for an agent given a request.
"""

from __future__ import annotations

import gc
import os
import sys

from . import protocol
from .progress import Progress
from .stdio import InputLines, ProtocolOut

# launch.sh, what `git xet install` registers: it answers `init` and starts Python for an
# agent given a request, with what it read in these two variables.
LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch.sh")
LAUNCHED_INIT = "GIT_XET_LAUNCHED_INIT"  # the init line it answered
LAUNCHED_REQUEST = "GIT_XET_LAUNCHED_REQUEST"  # the first line it did not handle

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms per agent start
if TYPE_CHECKING:
    import logging
    from collections.abc import Iterable, Iterator


def _setup_logging() -> logging.Logger:
    """$GIT_XET_LOG=<file> logs there; GIT_TRANSFER_TRACE/GIT_TRACE log to stderr (which git-lfs
    shows with GIT_TRACE=1). Otherwise only warnings, to stderr."""
    target = os.environ.get("GIT_XET_LOG")
    trace = os.environ.get("GIT_TRANSFER_TRACE") or os.environ.get("GIT_TRACE")
    import logging

    handler: logging.Handler
    if target:
        from ..platform.private_paths import open_private_append

        handler = logging.StreamHandler(open_private_append(target))  # 0600: what it logs is the user's
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter(f"%(asctime)s git-xet[{os.getpid()}] %(name)s %(levelname)s %(message)s"))
    root = logging.getLogger("git_xet")
    root.addHandler(handler)
    from .terminal import TerminalHandler

    root.addHandler(TerminalHandler())  # retries and the like, where the user can see them
    root.setLevel(logging.DEBUG if (target or trace) else logging.WARNING)
    return logging.getLogger("git_xet.agent")


def _describe(exc: BaseException) -> str:
    from ..client.errors import TransferError
    from .endpoints import ConfigError

    if isinstance(exc, TransferError) and exc.status in (401, 403):
        from .endpoints import auth_fix

        text = str(exc)  # the server's reason; the fix for the mode in use follows
        return text if "HF_TOKEN" in text else f"{text}; {auth_fix()}"  # (the Hub's token route names it already)
    if isinstance(exc, (TransferError, ConfigError)):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}{': ' + str(exc.filename) if exc.filename else ''}"
    return f"internal error ({type(exc).__name__}: {exc}); set GIT_XET_LOG=/tmp/git-xet.log and retry to see details"


def _collect_from_now_on() -> None:
    """End the start-up phase of `run`: what is alive now (modules, classes, the session) is
    frozen, never traversed again, and cyclic collection resumes for what objects create."""
    if not gc.isenabled():
        gc.freeze()
        gc.enable()


def run(stdin=None) -> int:
    """Serve git-lfs on `stdin` (an iterable of lines; the process's stdin when None). Once
    `init` is answered (here, or by launch.sh before this process started), an agent reading
    its real stdin hands its objects to a worker from the git-lfs process's fork server when
    one serves it (handover.py), else serves them here."""
    # Start-up (imports, the first object's session) creates ~10^5 objects that live as long as
    # the process. With the cyclic collector on, collections that free nothing traverse them
    # again and again, and once more at exit: ~20% of an agent's CPU to its first `complete`,
    # paid by each of the eight agents git-lfs starts. So it stays off until the first object
    # has been handled (whatever its outcome), then `_collect_from_now_on`.
    gc.disable()
    out = ProtocolOut()
    answered: str | None = None
    if stdin is None:
        answered, pending = _launched()
        lines: Iterable[str] = InputLines(0, pending)
    else:
        lines = iter(stdin)  # one pass: init, then what follows
    init = _answered_init(answered) if answered is not None else _answer_init(lines, out)
    if not isinstance(init, protocol.Init):
        return init
    if isinstance(lines, InputLines):
        from .handover import serve_handed_over

        return serve_handed_over(init, lines, out, serve, _prepare, _show_first_byte(lines.unread(), out))
    return serve(lines, out, init.remote)


def _show_first_byte(pending: bytes, out: ProtocolOut) -> str:
    """Report the first byte of the request launch.sh left us, before this command's fork
    server starts and imports the transfer code (~0.1-0.2 s): git-lfs holds its other workers
    until worker 0 shows progress (see Progress), so they start that much sooner. Returns the
    oid reported ("": none), so that whoever serves it does not report that byte again."""
    line = pending.split(b"\n", 1)[0].strip()
    if not line:
        return ""
    try:
        req = protocol.parse_request(line.decode())
    except (protocol.ProtocolError, UnicodeDecodeError):
        return ""  # whoever serves it answers it
    if not isinstance(req, protocol.Transfer) or req.size <= 0:
        return ""
    out.send(protocol.progress(req.oid, 1, 1))
    return req.oid


def _launched() -> tuple[str | None, bytes]:
    """What launch.sh read before it started this process: the `init` line it answered (None:
    it answered none) and the bytes of the line it left to us, first of our input. Removed from
    the environment at once: no child (git) inherits a request's authorization header, and the
    agents of one command keep equal environments (the fork server's identity check)."""
    answered = os.environ.pop(LAUNCHED_INIT, None)
    pending = os.environ.pop(LAUNCHED_REQUEST, None)
    return answered, b"" if pending is None else os.fsencode(pending) + b"\n"


def _answered_init(line: str) -> protocol.Init | int:
    """The `init` launch.sh answered; exit status 1 if it is not one (its answer is sent, so
    there is nothing to refuse: this agent stops, and git-lfs reports it gone)."""
    try:
        req = protocol.parse_request(line)
    except protocol.ProtocolError as exc:
        req = None
        reason = str(exc)
    else:
        reason = "not an init request"
    if isinstance(req, protocol.Init):
        return req
    _setup_logging().warning("the launcher answered a line that is no init (%s); stopping", reason)
    return 1


def _prepare(operation: str) -> None:
    """The fork server's start (session.prepare), imported there only."""
    from .session import prepare

    prepare(operation)


def _requests(lines: Iterable[str]) -> Iterator[str]:
    """The non-blank lines, stripped, taken from `lines` one at a time as they are asked for."""
    for raw in lines:
        line = raw.strip()
        if line:
            yield line


def _answer_init(lines: Iterable[str], out: ProtocolOut) -> protocol.Init | int:
    """Read up to `init` and answer it; the exit status instead when the agent must stop
    (terminate before init: 0; a bad first request: 1, after telling git-lfs why)."""
    for line in _requests(lines):
        try:
            req = protocol.parse_request(line)
            if not isinstance(req, (protocol.Init, protocol.Terminate)):
                raise protocol.ProtocolError("the first request must be init")
        except protocol.ProtocolError as exc:
            _setup_logging().warning("bad request: %s", exc)
            # git-lfs waits for the answer to init before anything else: refuse it (git-lfs
            # shows the message and stops this agent) rather than leave it waiting.
            out.send(protocol.init_error(f"git-xet: {exc}"))
            return 1
        if isinstance(req, protocol.Terminate):
            return 0
        refused = _prune_refusal(req)
        if refused is not None:
            _setup_logging().warning("%s", refused)
            out.send(protocol.init_error(refused))  # git-lfs shows it; its prune deletes nothing
            return 1
        out.send(protocol.init_ok())
        return req
    return 0


def _prune_refusal(init: protocol.Init) -> str | None:
    """Why a download `init` from a git-lfs that prunes objects the store lacks is refused
    (prune_guard.py, imported only for download inits); None: answer it."""
    if init.operation != "download":
        return None
    from .prune_guard import refusal

    return refusal(init.operation, init.remote)


def serve(lines: Iterable[str], out: ProtocolOut, remote: str | None, shown: str = "") -> int:
    """Serve the requests after `init` until terminate (or the end of input); `shown`: the oid
    of the first request, when its first byte was reported already (_show_first_byte)."""
    session = None
    log = None  # logging (~10 ms of imports) is set up with the first request
    for line in _requests(lines):
        try:
            req = protocol.parse_request(line)
        except protocol.ProtocolError as exc:
            log = log or _setup_logging()
            log.warning("bad request: %s", exc)
            if exc.oid:
                out.send(protocol.complete_error(exc.oid, f"git-xet: {exc}", protocol.ERR_BAD_REQUEST))
            continue
        if isinstance(req, protocol.Init):  # again: answered as the first was
            out.send(protocol.init_ok())
            remote = req.remote
            continue
        if isinstance(req, protocol.Terminate):
            break
        log = log or _setup_logging()

        # Report the first byte before importing the pipelines: git-lfs holds its other workers
        # until worker 0 shows progress.
        def report(so_far: int, since: int, oid: str = req.oid) -> None:  # this object's oid, bound now
            out.send(protocol.progress(oid, so_far, since))

        already = 1 if session is None and req.oid == shown else 0
        progress = Progress(report, req.size, first_byte=session is None and not already, reported=already)
        if session is None:
            from .session import AgentSession

            session = AgentSession(remote)
        try:
            path = session.transfer(req, progress)
        except Exception as exc:  # every failure becomes an error answer
            log.exception("%s of %s failed", req.operation, req.oid)
            out.send(protocol.complete_error(req.oid, f"git-xet: {req.operation} of {req.oid[:12]} failed: {_describe(exc)}"))
            continue
        finally:
            _collect_from_now_on()
        progress.finish()
        out.send(protocol.complete(req.oid, path))
    if session is not None:
        session.close()
    return 0
