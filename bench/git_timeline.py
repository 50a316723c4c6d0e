"""Where the wall time of one `git push` and one `git clone` goes: the machine's CPU and which
processes ran, sampled while they run, against the moment our agents' last request ended.

    python bench/git_timeline.py [--files 3] [--file-mib 256] [--interval 0.1] [--tool git-xet|git-lfs] [--verbose]

A diagnostic for bench/git_e2e.py, whose ratios say how long, not why. Each phase starts with
the page cache written back (common.settle_disk), as there. Every `--interval` seconds it reads
/proc: the share of the cores in use, and each thread that is running (R) or waiting for the
disk (D), by process: `server` (the server and its threads), `agent` (our transfer agents),
`git-lfs`, `git`, or `other`. It reports per phase:

- when the last request to the server ended (git-xet: its access log); after that, what the
  push or clone waits for is git and git-lfs, not our agents or the server;
- how long the machine was mostly idle (under half a core busy), and how often a thread was
  waiting for the disk meanwhile: time lost to fsyncs rather than to CPU;
- each process group's share of running-thread samples, before and after the last request.

With --verbose, every sample. Figures from one run; this VM's noise applies.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import lfs_repo_with, machine, model_files, process_tree, settle_disk
from git_e2e import tool_remote

from tests.support.gitenv import make_git_env

IDLE_BELOW = 50.0  # percent of one core: the machine is "mostly idle" below this


class Sample(NamedTuple):
    at: float  # seconds since the phase started
    busy: float  # percent of one core (100 x cores = every core busy)
    running: Counter[str]  # process group -> threads running
    disk_waits: int  # threads waiting for the disk


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the machine so far (idle and iowait count as not busy)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def _group(pid: int, comm: str, server: set[int]) -> str:
    if pid in server:
        return "server"
    if comm in ("git-xet", "git-lfs", "git"):
        return "agent" if comm == "git-xet" else comm
    return "other"


def _threads(server: set[int]) -> tuple[Counter[str], int]:
    running: Counter[str] = Counter()
    disk_waits = 0
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            comm = Path(f"/proc/{entry}/comm").read_text().strip()
            for tid in os.listdir(f"/proc/{entry}/task"):
                state = Path(f"/proc/{entry}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                if state == "R":
                    running[_group(int(entry), comm, server)] += 1
                elif state == "D":
                    disk_waits += 1
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return running, disk_waits


@contextmanager
def sampling(interval: float, server_pid: int) -> Iterator[list[Sample]]:
    """Samples taken every `interval` seconds until the block ends."""
    samples: list[Sample] = []
    stop = threading.Event()
    start = time.monotonic()

    def run() -> None:
        server = set(process_tree(server_pid))
        cores = os.cpu_count() or 1
        before = _cpu_ticks()
        while not stop.wait(interval):
            now = _cpu_ticks()
            busy = 100.0 * cores * (now[0] - before[0]) / max(1, now[1] - before[1])
            before = now
            running, disk_waits = _threads(server)
            samples.append(Sample(time.monotonic() - start, busy, running, disk_waits))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=10)


def last_request_end(log_text: str, since: float) -> float | None:
    """Wall-clock time the last request logged after `since` ended (git xet serve's access log)."""
    last = None
    for line in log_text.splitlines():
        start = line.find("{")
        if start < 0 or '"method"' not in line or "/health" in line:
            continue
        at = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        if at >= since:
            last = at if last is None else max(last, at)
    return last


def summarize(name: str, seconds: float, samples: list[Sample], transfers_end: float | None, verbose: bool) -> dict:
    idle = [s for s in samples if s.busy < IDLE_BELOW]
    interval = samples[1].at - samples[0].at if len(samples) > 1 else 0.0
    parts: dict[str, Counter[str]] = {"before": Counter(), "after": Counter()}
    for sample in samples:
        parts["after" if transfers_end is not None and sample.at > transfers_end else "before"].update(sample.running)
    summary = {
        "seconds": seconds,
        "transfers_end": transfers_end,
        "mostly_idle_seconds": len(idle) * interval,
        "disk_waits_while_idle": sum(s.disk_waits for s in idle),
        "mean_busy_percent": sum(s.busy for s in samples) / max(1, len(samples)),
        "shares": {part: {group: count / max(1, sum(c.values())) for group, count in c.most_common()} for part, c in parts.items()},
    }
    end = f"last request ended at +{transfers_end:.2f} s" if transfers_end is not None else "no request log"
    print(f"{name}: {seconds:.2f} s; {end}; CPU {summary['mean_busy_percent']:.0f}% of one core on average")
    print(f"  mostly idle (< {IDLE_BELOW:.0f}% of one core) for {summary['mostly_idle_seconds']:.2f} s, with {summary['disk_waits_while_idle']} thread samples waiting for the disk")
    for part, shares in summary["shares"].items():
        if shares:
            when = f" {part} the last request" if transfers_end is not None else ""
            print(f"  running threads{when}: " + ", ".join(f"{g} {v:.0%}" for g, v in shares.items()))
    if verbose:
        for s in samples:
            print(f"    +{s.at:5.2f} {s.busy:4.0f}% {dict(s.running.most_common())} disk waits {s.disk_waits}")
    return summary


def run(tool: str, files: int, file_mib: int, interval: float, verbose: bool) -> dict:
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-timeline-") as tmp:
        base = Path(tmp)
        sources = model_files(base, files, file_mib)
        genv = make_git_env(base)
        with tool_remote(tool, base, genv, None) as (log, server_pid):
            work = lfs_repo_with(genv, base, sources)
            phases = [("push", ["git", "push", "-q", "origin", "main"], work), ("clone", ["git", "clone", "-q", str(base / "remote.git"), str(base / "clone")], base)]
            for name, cmd, cwd in phases:
                settle_disk()
                wall_start, start = time.time(), time.perf_counter()
                with sampling(interval, server_pid) as samples:
                    subprocess.run(cmd, cwd=cwd, env=genv.env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                seconds = time.perf_counter() - start
                time.sleep(0.3)  # a request's line is logged just after its response went out
                # Only git xet serve's log has each request's time; the plain LFS server's has none.
                last = last_request_end(log.path.read_text(errors="replace"), wall_start) if tool == "git-xet" else None
                results[name] = summarize(name, seconds, samples, None if last is None else last - wall_start, verbose)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--tool", choices=("git-xet", "git-lfs"), default="git-xet")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"{args.tool}: git push and clone of {args.files} x {args.file_mib} MiB; {machine()}")
    results = run(args.tool, args.files, args.file_mib, args.interval, args.verbose)
    if args.json:
        args.json.write_text(json.dumps({"tool": args.tool, "files": args.files, "file_mib": args.file_mib, "phases": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
