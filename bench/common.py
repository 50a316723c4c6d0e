"""Shared pieces of the benchmarks: test data, the v2 edit, timing, and reading how many
bytes a server received from its request log."""

from __future__ import annotations

import compileall
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MIB = 1 << 20


def compile_bytecode() -> None:
    """Byte-compile git_xet as installing a wheel does. Python writes the .pyc files on first
    import too, unless PYTHONDONTWRITEBYTECODE is set (as in some CI and sandbox shells): then
    every agent git-lfs starts would compile ~100 modules from source, a cost no installed copy
    pays, and no baseline either (git-lfs is Go; pip byte-compiles what it installs). Called
    before timing by git_e2e.py, wan.py and many_files.py."""
    import git_xet

    compileall.compile_dir(Path(git_xet.__file__).parent, quiet=1)


def settle_disk() -> None:
    """Write back what earlier steps left dirty in the page cache (set-up files, the last run's
    objects), so that a timed phase pays only for its own writes: both tools' servers fsync
    what they store, and those fsyncs otherwise wait behind writeback of files the phase never
    touched, by however much happened to be dirty at the time."""
    os.sync()


def timed(cmd: list[str], *, cwd: Path, env: dict[str, str], stderr_to: Path) -> dict:
    """Wall seconds of `cmd`, from a written-back page cache (settle_disk); raises with its
    stderr when it fails."""
    settle_disk()
    start = time.perf_counter()
    with open(stderr_to, "w") as err:
        code = subprocess.run(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err, check=False).returncode
    seconds = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({code}):\n{stderr_to.read_text(errors='replace')[-3000:]}")
    return {"seconds": seconds}


def children_cpu() -> float:
    """User + sys seconds of every descendant process waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def process_times(pid: int) -> tuple[float, float]:
    """User and sys seconds a running process (all its threads) and its running descendants (a
    server's workers) have used so far, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    user = sys_ = 0
    for each in process_tree(pid):
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # exited meanwhile
            continue
        user += int(fields[11])
        sys_ += int(fields[12])
    return user / tick, sys_ / tick


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, from /proc/<pid>/task/<tid>/children."""
    tree, todo = [], [pid]
    while todo:
        each = todo.pop()
        tree.append(each)
        for task in Path(f"/proc/{each}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except FileNotFoundError:
                continue
    return tree


def process_cpu(pid: int) -> float:
    """User + sys seconds a running process and its running descendants have used so far."""
    return sum(process_times(pid))


def write_random_file(path: Path, size: int, seed: int) -> None:
    """Incompressible data (model weights compress little too), reproducible per seed."""
    rng = random.Random(seed)
    with open(path, "wb") as out:
        for left in range(size, 0, -64 * MIB):
            out.write(rng.randbytes(min(64 * MIB, left)))


def write_model_like_file(path: Path, size: int, seed: int) -> None:
    """Model-like weights, reproducible per seed: bf16 values of a normal distribution with
    std 0.02 (how transformer weights are initialised, and roughly how trained ones look). Each
    value's high byte (sign and exponent) takes few values, so byte-grouped LZ4 (BG4) stores
    about 13% fewer bytes; random bytes, as write_random_file writes, compress not at all."""
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(path, "wb") as out:
        for left in range(size, 0, -64 * MIB):
            count = min(64 * MIB, left)
            values = rng.standard_normal((count + 1) // 2, dtype=np.float32) * np.float32(0.02)
            out.write((values.view(np.uint32) >> 16).astype("<u2").tobytes()[:count])


def model_files(directory: Path, files: int, file_mib: int) -> list[Path]:
    """`files` random files of `file_mib` MiB in `directory`, `model-<i>.bin`, each from seed i
    (the same bytes in every script and run)."""
    paths = [directory / f"model-{i}.bin" for i in range(files)]
    for i, path in enumerate(paths):
        write_random_file(path, file_mib * MIB, seed=i)
    return paths


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
        """(bytes in, bytes out) of object data since the last mark(): xorbs, shards and LFS
        objects. The LFS batch API's JSON (a few hundred bytes per call) is left out: it is
        negotiation, not data, and only some clients make the call."""
        time.sleep(0.3)  # a request's line is logged just after its response went out
        new = [e for e in self._entries()[self._mark :] if "/info/lfs/" not in e["path"]]
        return sum(e["bytes_in"] for e in new), sum(e["bytes_out"] for e in new)


def write_json(path: Path | None, summary: dict) -> None:
    """The --json output every benchmark script offers (run_all.py collects them)."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2))


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


def lfs_repo_with(genv, root: Path, sources: list[Path]) -> Path:
    """A work tree under `root` with `sources` committed as LFS files (*.bin) and a bare
    `root/remote.git` as its origin; `genv` is a tests.support.gitenv.GitEnv. Returns the work tree."""
    genv.git("init", "-q", "--bare", str(root / "remote.git"))
    work = root / "work"
    genv.git("init", "-q", str(work))
    genv.git("lfs", "track", "*.bin", cwd=work)
    for src in sources:
        shutil.copyfile(src, work / src.name)
    genv.git("add", ".", cwd=work)
    genv.git("commit", "-qm", "v1", cwd=work)
    genv.git("remote", "add", "origin", str(root / "remote.git"), cwd=work)
    return work
