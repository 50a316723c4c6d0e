"""Whether the server may send a response body from a file with sendfile(2): the kernel copies
from the page cache to the socket, with no worker thread and no copy into Python.

asyncio's selector event loops (Linux, macOS) do it natively; elsewhere (Windows' proactor loop,
uvloop) and with GIT_XET_PORTABLE=1 the answer is no, and the handler streams the file in pieces
through a worker thread (server/http_io.py): the same bytes, more CPU per byte.
"""

from __future__ import annotations

import asyncio
import asyncio.selector_events

from .switch import portable


def native_sendfile(loop: asyncio.AbstractEventLoop) -> bool:
    return isinstance(loop, asyncio.selector_events.BaseSelectorEventLoop) and not portable()
