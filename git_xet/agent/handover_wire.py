"""What an agent and its command's fork server say to each other (handover.py is the agent's
side, fork_server.py the server's): the request's format, the one-byte answers, the waits, and
the identity two agents must share for one's worker to serve the other. A module of its own so
that the two sides import it rather than each other. C modules only (see handover.py: the agent
imports this).
"""

from __future__ import annotations

import os
import sys
from _struct import Struct

TYPE_CHECKING = False  # not typing's: importing typing costs ~4 ms per agent start
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .protocol import Init
    from .stdio import ProtocolOut

    Serve = Callable[[Iterable[str], ProtocolOut, "str | None", str], int]
    Prepare = Callable[[str], None]

HANDOVER_WAIT = 10.0  # seconds an agent waits for the server's answer before serving itself
IDLE_EXIT = 60.0  # seconds without a request after which the server takes no more (and ends with its workers)
MAX_REQUEST = 1 << 20
FORMAT = 2  # of the request; a server of another git-xet refuses a request it cannot read
STDIO = Struct("3i")  # stdin, stdout (ProtocolOut's: fd 1 is stderr's copy), stderr, as SCM_RIGHTS carries them

# The server's and the worker's answers to an agent; the agent's commitment.
READY, REFUSED, GO, STARTED, STATUS = b"R", b"N", b"G", b"W", b"S"


def identity(init: Init) -> tuple:
    """What must be equal for a worker forked from one agent's server to serve another agent."""
    return (sys.executable, tuple(sys.argv), os.getcwd(), tuple(sorted(os.environ.items())), init.operation, init.remote, init.concurrent_transfers)


