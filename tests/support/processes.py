"""Services the tests start: waiting until one answers, and stopping it by its process, bounded."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable

import httpx


def wait_for_health(url: str, proc: subprocess.Popen, log_tail: Callable[[], str], timeout: float = 30) -> None:
    """Until `url`/health answers 200; RuntimeError (with the log's tail) if the process exits or
    `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode}): {log_tail()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() >= deadline:
            raise RuntimeError(f"the server never answered /health within {timeout:g} s: {log_tail()}")
        time.sleep(0.05)


def stop_process(proc: subprocess.Popen, grace: float = 15) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds (weed, for one, may ignore SIGTERM a while)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=15)
