"""The group sender shared by one git-lfs command's agents (issue 44 §2): client/group_send.py
sends several senders' small files in one upload bundle; this carries each agent's bundle to it.

How:
- An agent with a small bundle to send connects to the abstract socket named after its git-lfs
  process (lineage.py), its uid, "send" and a hash of the store's endpoint and token (so only
  agents that would have made the same request, to the same store with the same credentials,
  meet). Nobody there: it binds the name and runs the sender (a GroupSender posting with its own
  ServeExtension) for the others, and sends its own bundles through it in-process.
- Each side checks the other's uid (SO_PEERCRED), as handover.py does: another local user
  cannot answer for the sender, nor send through it. Each request also names the key, which
  the sender compares with its own.
- A bundle travels as a memfd passed with SCM_RIGHTS (no copy through the socket's buffer),
  its layout in a JSON header; one byte comes back, once the server answered the group's
  bundle: sent, send it alone, or this file's sha256 claim refused.
- Anything else (no answer, EOF, a timeout, a refusal) makes the agent post its own bundle, as
  it did before grouping: the server stores a bundle idempotently, so a bundle sent twice (the
  sender died after posting it) costs a request, never a file.
- The sender drains before its agent exits (`close`): it takes no new agents, answers what it
  has read, and lets idle links see EOF, whose agents then send alone or run the next sender.

Linux only (platform/local_sockets.py, memfd); elsewhere, with GIT_XET_PORTABLE=1 or
GIT_XET_FORK_SERVER=0 or GIT_XET_GROUP_SEND=0, or without a git-lfs process above the agent,
each agent posts its own.
"""

from __future__ import annotations

import array
import hashlib
import json
import os
import socket
import threading
from typing import TYPE_CHECKING, Final

from ..client.errors import TransferError
from ..client.group_send import SEND_ALONE, SENT, GroupSender
from ..core.bundle_merge import MAX_GROUP_BYTES, BundleParts
from ..core.upload_bundle import MAX_BUNDLE_XORBS
from ..platform import local_sockets
from .lineage import lfs_process_id

if TYPE_CHECKING:
    from ..client.serve_extension import ServeExtension

FORMAT: Final = 1  # of a request's header; a sender of another git-xet answers ALONE
ANSWER_WAIT: Final = 300.0  # seconds an agent waits for the group's answer (the post retries inside)
POLL: Final = 0.25  # seconds between the sender's checks for `close` while it waits for requests
DRAIN_WAIT: Final = 120.0  # seconds `close` waits for the requests it read to be answered
MAX_HEADER: Final = 4096
# Group bundles posted at once. On a 2-core machine a push of small files is CPU-bound (client
# + server): two in flight halved the files per bundle (200 files: 100 bundles instead of ~55)
# and cost the server 0.2 s of CPU more per 1000 files (bench/many_files.py), for no wall time.
IN_FLIGHT: Final = 1
_SENT, _ALONE, _REFUSED = b"S", b"A", b"R"
_REFUSAL: Final = "the server refused the shard: its sha256 metadata does not match its content"


def available() -> bool:
    """Whether agents can share a sender here (see the module's docstring)."""
    return (
        local_sockets.available()
        and hasattr(os, "memfd_create")
        and os.environ.get("GIT_XET_FORK_SERVER") != "0"
        and os.environ.get("GIT_XET_GROUP_SEND") != "0"  # each agent posts its own (to compare)
    )


def attach(ext: ServeExtension) -> CommandGroup | None:
    """Give `ext` this command's shared sender, where the platform and the store allow: the
    group to close at the agent's end, or None (each bundle is posted alone, as before)."""
    if ext.group is not None or not ext.offered.upload_bundles or not available():
        return None
    lfs_process = lfs_process_id()
    if lfs_process is None:
        return None
    group = CommandGroup(lfs_process, ext)
    ext.group = group
    return group


def _key(endpoint: str, token: str | None) -> str:
    """Who may share a sender: the same store and credentials (a hash: the name is visible)."""
    return hashlib.sha256(b"git-xet group send\0" + endpoint.encode() + b"\0" + (token or "").encode()).hexdigest()[:32]


def _unix() -> socket.socket:
    return socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)


class CommandGroup:
    """This agent's way to the command's sender: a link to the agent running it, or the sender
    itself when this agent runs it. One request at a time (an agent sends one file at a time)."""

    def __init__(self, lfs_process: str, ext: ServeExtension) -> None:
        self._lfs_process = lfs_process
        self._ext = ext
        self._lock = threading.Lock()
        self._runner: _Runner | None = None
        self._link: socket.socket | None = None
        self._key = ""

    def send(self, parts: BundleParts) -> str:
        """GroupSender.send's answers, through whichever sender this command's agents share."""
        key = _key(self._ext.backend.endpoint, self._ext.backend.token())
        with self._lock:
            if key != self._key:  # new credentials (a refreshed token): another group
                self._close_locked()
                self._key = key
            if self._runner is None and self._link is None:
                self._join(key)
            runner, link = self._runner, self._link
            if runner is not None:
                return runner.sender.send(parts)
            if link is None:
                return SEND_ALONE
            answer = _exchange(link, key, parts)
            if answer is None:  # the sender is gone, or did not answer: next time, find (or be) the next one
                link.close()
                self._link = None
                return SEND_ALONE
        if answer == _REFUSED:
            raise TransferError(_REFUSAL, retryable=False)
        return SENT if answer == _SENT else SEND_ALONE

    def _join(self, key: str) -> None:
        """Connect to the sender of this command and key, or become it if there is none."""
        where = local_sockets.address(f"{self._lfs_process}/send/{key}")
        for _ in range(2):  # a race to bind: the loser connects to the winner
            conn = _unix()
            try:
                conn.settimeout(ANSWER_WAIT)
                conn.connect(where)
            except (ConnectionRefusedError, FileNotFoundError):  # no sender: be it
                conn.close()
            except OSError:
                conn.close()
                return
            else:
                if local_sockets.peer_uid(conn) == os.getuid():
                    self._link = conn
                else:  # another user holds the name: post alone
                    conn.close()
                return
            listener = _unix()
            try:
                listener.bind(where)
                listener.listen(64)
            except OSError:
                listener.close()
                continue
            self._runner = _Runner(listener, key, GroupSender(self._post, in_flight=IN_FLIGHT))
            return

    def _post(self, parts: BundleParts) -> object:
        """The group's bundle, posted as this agent posts its own (no upload-stream header: a
        grouped bundle holds every xorb its shard names)."""
        return self._ext.post_bundle(parts.xorbs, parts.shard)

    def close(self) -> None:
        """At the agent's end: drain the sender this agent runs, or drop the link to another's."""
        with self._lock:
            self._close_locked()

    def _close_locked(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None
        if self._link is not None:
            self._link.close()
            self._link = None


def _exchange(link: socket.socket, key: str, parts: BundleParts) -> bytes | None:
    """Hand `parts` to the sender and wait for its one-byte answer; None if none came."""
    fd = os.memfd_create("git-xet-bundle", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as out:
            for _, body in parts.xorbs:
                out.write(body)
            out.write(parts.shard)
        header = json.dumps([FORMAT, key, [[xorb_hex, len(body)] for xorb_hex, body in parts.xorbs], len(parts.shard)]).encode()
        link.sendmsg([header], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
        answer = link.recv(1)
    except OSError:  # (a timeout too)
        return None
    finally:
        os.close(fd)
    return answer if answer in (_SENT, _ALONE, _REFUSED) else None


class _Runner:
    """The sender, run by the agent that bound the name: a thread accepting the command's other
    agents, one per agent reading its requests, all sending through one GroupSender."""

    def __init__(self, listener: socket.socket, key: str, sender: GroupSender) -> None:
        self.sender = sender
        self._key = key
        self._listener = listener
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, name="git-xet-group-accept", daemon=True)
        self._accepting.start()

    def _accept(self) -> None:
        self._listener.settimeout(POLL)
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if local_sockets.peer_uid(conn) != os.getuid():
                conn.close()
                continue
            thread = threading.Thread(target=self._serve, args=(conn,), name="git-xet-group-link", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        """One agent's requests, each answered once its bundle's group was; until it closes its
        end or the sender closes."""
        conn.settimeout(POLL)
        with conn:
            while not self._closing.is_set():
                try:
                    message, ancillary, flags, _ = conn.recvmsg(MAX_HEADER, socket.CMSG_SPACE(4))
                except TimeoutError:
                    continue
                except OSError:
                    return
                fds = [fd for level, kind, data in ancillary if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS for fd in array.array("i", data[: len(data) - len(data) % 4])]
                if not message:
                    for fd in fds:
                        os.close(fd)
                    return
                try:
                    answer = self._answer(message, fds[0] if len(fds) == 1 and not flags & socket.MSG_CTRUNC else None)
                finally:
                    for fd in fds:
                        os.close(fd)
                try:
                    conn.sendall(answer)
                except OSError:  # the agent is gone; what was sent is stored all the same
                    return

    def _answer(self, message: bytes, fd: int | None) -> bytes:
        try:
            parts = self._parts(message, fd)
            if parts is None:
                return _ALONE
            return _SENT if self.sender.send(parts) == SENT else _ALONE
        except TransferError:  # this file's claim was refused (send raises only that)
            return _REFUSED
        except Exception:  # noqa: BLE001 -- a bundle we cannot read or send: its agent sends it, and hears the server itself
            return _ALONE

    def _parts(self, message: bytes, fd: int | None) -> BundleParts | None:
        """The request's bundle, if it is one of this key's, in this format, within bounds."""
        request = json.loads(message)  # (not marshal, which is not safe against malformed input)
        if fd is None or not (isinstance(request, list) and len(request) == 4 and request[0] == FORMAT and request[1] == self._key):
            return None
        _, _, layout, shard_len = request
        if not (isinstance(layout, list) and 0 < len(layout) <= MAX_BUNDLE_XORBS and type(shard_len) is int):
            return None
        if not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and type(x[1]) is int and x[1] >= 0 for x in layout):
            return None
        total = sum(size for _, size in layout) + shard_len
        if not 0 < shard_len <= total <= MAX_GROUP_BYTES or os.fstat(fd).st_size != total:
            return None
        data = b""
        while len(data) < total:
            piece = os.pread(fd, total - len(data), len(data))
            if not piece:
                return None
            data += piece
        xorbs: list[tuple[str, bytes]] = []
        at = 0
        for xorb_hex, size in layout:
            xorbs.append((xorb_hex, data[at : at + size]))
            at += size
        shard = data[at:]  # its chunk count as counted here, not as the agent said
        return BundleParts.of(xorbs, shard)

    def close(self) -> None:
        """Take no new agents; answer the requests already read (bounded); then each link
        closes, and its agent sends alone or runs the next sender."""
        self._closing.set()
        self._accepting.join(timeout=DRAIN_WAIT)
        self._listener.close()  # the name is free for the next sender
        for thread in list(self._threads):
            thread.join(timeout=DRAIN_WAIT)
