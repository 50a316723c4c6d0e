"""How the agents of one git-lfs command find each other: Linux's abstract-namespace Unix
sockets (a name, no file to clean up, gone with the last process) whose peer's uid the kernel
vouches for (SO_PEERCRED), with file descriptors passed along (SCM_RIGHTS) to a worker forked
for them (agent/handover.py, agent/fork_server.py).

Portable default: `available()` is False (not Linux, no fork, or GIT_XET_PORTABLE=1), and each
agent serves its own objects, as it did before the fork server existed: slower to start (each
imports the transfer code itself), the same transfers.

Only C modules at import (_socket, _struct): agents load this before their first object.
"""

from __future__ import annotations

import _socket
import os
import sys
from _struct import Struct

from .switch import portable

_CREDENTIALS = Struct("3i")  # struct ucred: pid, uid, gid


def available() -> bool:
    """Whether this process can serve and reach a fork server: Linux, fork, SEQPACKET sockets
    with peer credentials, and accelerators on."""
    return (
        sys.platform.startswith("linux")
        and hasattr(os, "fork")
        and hasattr(_socket, "SO_PEERCRED")
        and hasattr(_socket, "AF_UNIX")
        and not portable()
    )


def address(name: str) -> bytes:
    """The abstract socket address for `name` (unique to this user: other users' agents may
    share the namespace)."""
    return f"\0git-xet-agents/{os.getuid()}/{name}".encode()


def seqpacket() -> _socket.socket:
    """A new local SEQPACKET socket (messages keep their bounds: one request, one answer)."""
    return _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of `sock`, as the kernel saw it connect."""
    return _CREDENTIALS.unpack(sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, _CREDENTIALS.size))[1]
