"""Whether the C extensions (_gearhash, _crc64, _bg4, _merkle) are to be loaded.

`GIT_XET_NO_NATIVE=1` runs git-xet as an install without a C compiler would: every function
falls back to its pure-Python reference (chunking at a few MB/s), and no warning is printed
(the fallback was asked for). CI runs the agent's and the server's end-to-end tests so once.
"""

from __future__ import annotations

import os

NO_NATIVE = "GIT_XET_NO_NATIVE"


def native_disabled() -> bool:
    """True when GIT_XET_NO_NATIVE is set (and not to 0): the extensions stay unloaded."""
    return os.environ.get(NO_NATIVE, "") not in ("", "0")
