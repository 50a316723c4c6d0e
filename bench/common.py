"""Shared pieces of the benchmarks: test data, the v2 edit, timing with peak memory, and
reading how many bytes a server received from its request log."""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIB = 1 << 20

# Runs a command and reports its wall time and the peak RSS of its largest descendant
# (git waits for git-lfs, which waits for the agents, so their rusage reaches this process).
_TIMED = r"""
import json, resource, subprocess, sys, time
t = time.perf_counter()
code = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], "w")).returncode
print(json.dumps({"seconds": time.perf_counter() - t, "rc": code,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""


def write_random_file(path: Path, size: int, seed: int) -> None:
    """Incompressible data (model weights compress little too), reproducible per seed."""
    rng = random.Random(seed)
    with open(path, "wb") as out:
        for left in range(size, 0, -64 * MIB):
            out.write(rng.randbytes(min(64 * MIB, left)))


def edit_file(path: Path, seed: int) -> None:
    """The v2 of a file: 1% overwritten in ten places, plus a 1 KiB insertion near the start
    that shifts everything after it (what fixed-size blocks cannot deduplicate)."""
    rng = random.Random(seed)
    data = bytearray(path.read_bytes())
    span = len(data) // 1000  # ten spans of 0.1% each
    for k in range(10):
        start = (k * 2 + 1) * len(data) // 20
        data[start : start + span] = rng.randbytes(span)
    data[4096:4096] = rng.randbytes(1024)
    path.write_bytes(data)


def timed(cmd: list[str], *, cwd: Path, env: dict[str, str], stderr_to: Path) -> dict:
    """Wall seconds and peak RSS (MiB) of `cmd`; raises with its stderr when it fails."""
    out = subprocess.run([sys.executable, "-c", _TIMED, str(stderr_to), *cmd], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    if result["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({result['rc']}):\n{stderr_to.read_text(errors='replace')[-3000:]}")
    return result


class RequestLog:
    """Bytes a server received (request bodies) and sent, from its JSON-lines request log:
    `git xet serve`'s access log, or the plain LFS server's requests.jsonl."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._mark = 0

    def _entries(self) -> list[dict]:
        if not self.path.exists():
            return []
        entries = []
        for line in self.path.read_text(errors="replace").splitlines():
            start = line.find("{")
            if start >= 0 and '"bytes_in"' in line:
                entries.append(json.loads(line[start:]))
        return entries

    def mark(self) -> None:
        self._mark = len(self._entries())

    def since_mark(self) -> tuple[int, int]:
        """(bytes in, bytes out) since the last mark()."""
        time.sleep(0.3)  # a request's line is logged just after its response went out
        new = self._entries()[self._mark :]
        return sum(e["bytes_in"] for e in new), sum(e["bytes_out"] for e in new)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return f"{os.cpu_count()} cores, {cpu}, {mem:.0f} GiB RAM, Python {sys.version.split()[0]}"
