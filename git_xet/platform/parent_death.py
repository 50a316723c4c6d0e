"""Tying a forked process's life to its parent's (the server's workers, the agents' fork server):
Linux's PR_SET_PDEATHSIG through prctl; elsewhere (and with GIT_XET_PORTABLE=1) nothing: a
killed parent's children run on until stopped."""

from __future__ import annotations

import os
import signal
import sys

from .switch import portable

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send this process `sig` when its parent (pid `parent`, the process that
    forked it) dies. Linux only; elsewhere a killed parent's children run on until stopped."""
    if not sys.platform.startswith("linux") or portable():
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), sig)
