"""The switch that makes a Linux machine run what every platform runs.

`GIT_XET_PORTABLE=1`: every accelerator off: no fork server for the agents, no forked server
workers by default, no sendfile, no madvise or private anonymous maps, no allocator tuning. What
is left is the code path of a platform that has none of them (Windows, a locked-down container),
so CI can prove it on Linux. `GIT_XET_NO_NATIVE=1`: the C extensions are not loaded, as if no
compiler had built them (pure-Python chunking, hashing levels, CRC and histograms).

Read at each call (an environment lookup), not at import: a test or a forked worker may change
them. Only `os` at import: agents read these before their first object.
"""

from __future__ import annotations

import os

PORTABLE = "GIT_XET_PORTABLE"


def portable() -> bool:
    """True when every accelerator is to stay off (GIT_XET_PORTABLE set, and not to 0)."""
    return os.environ.get(PORTABLE, "") not in ("", "0")
