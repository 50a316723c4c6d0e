"""Upload/download throughput and agent start-up: git-xet vs hf-xet, same data, same run.

    python bench/transfer.py [--size-mib 1024] [--repeats 3] [--json OUT]

For each repeat, a fresh `git xet serve` on 127.0.0.1 and fresh caches: git-xet uploads the
file, hf-xet uploads the same file to another fresh server (no dedup between them), then each
downloads its own upload back. Also times the agent from spawn to its `init` answer against a
bare `python -c pass`. Prints medians and ratios (ours/theirs: <= 1.0 means at least as fast).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests import hf_xet_oracle  # noqa: E402
from tests.server_process import running_server  # noqa: E402


def _ours(url: str, token: str, src: Path, out: Path, cache: Path) -> tuple[float, float]:
    code = r"""
import sys, time, json
from pathlib import Path
from git_xet.memory import tune_allocator
from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.client.shard_cache import ShardCache
from git_xet.pipelines.upload import Uploader
from git_xet.pipelines.download import download_to_path
tune_allocator()
import os
url, src, out, cache = sys.argv[1:5]
token = os.environ["GIT_XET_BENCH_TOKEN"]
backend = HttpCasBackend(url, StaticToken(token))
t = time.perf_counter()
with Uploader(backend, ShardCache(Path(cache), backend.cache_key)) as up:
    r = up.add_file(src)
    up.finalize()
up_s = time.perf_counter() - t
t = time.perf_counter()
download_to_path(backend, r.file_hash, Path(out), size=r.size, sha256=r.sha256)
print(json.dumps([up_s, time.perf_counter() - t]))
"""
    # The token travels in the environment: a failed command line must not print it.
    proc = subprocess.run(
        [sys.executable, "-c", code, url, str(src), str(out), str(cache)],
        capture_output=True, text=True, env=dict(os.environ, GIT_XET_BENCH_TOKEN=token),
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"git-xet round trip failed:\n{proc.stderr[-3000:]}")
    return tuple(json.loads(proc.stdout))


def _theirs(url: str, token: str, src: Path, out: Path, work: Path) -> tuple[float, float]:
    t = time.perf_counter()
    (info,) = hf_xet_oracle.remote_upload([src], url, token, work / "up")
    up_s = time.perf_counter() - t
    t = time.perf_counter()
    hf_xet_oracle.remote_download([(out, info["hash"], info["size"])], url, token, work / "down")
    return up_s, time.perf_counter() - t


def _startup() -> tuple[float, float]:
    init = json.dumps({"event": "init", "operation": "upload", "remote": "origin", "concurrent": True, "concurrenttransfers": 8}) + "\n"
    t = time.perf_counter()
    # The installed `git-xet` script, as `git xet install` registers it for git-lfs.
    agent = Path(sys.executable).with_name("git-xet")
    proc = subprocess.Popen([str(agent), "transfer"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    proc.stdin.write(init)
    proc.stdin.flush()
    proc.stdout.readline()
    agent = time.perf_counter() - t
    proc.stdin.close()
    proc.wait()
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return agent, time.perf_counter() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    times: dict[str, list[float]] = {k: [] for k in ("ours_up", "ours_down", "theirs_up", "theirs_down", "agent_init", "python_pass")}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-") as tmp:
        root = Path(tmp)
        src = root / "data.bin"
        with open(src, "wb") as f:
            for left in range(args.size_mib << 20, 0, -(64 << 20)):
                f.write(os.urandom(min(64 << 20, left)))
        for i in range(args.repeats):
            for who in (("ours", "theirs") if i % 2 == 0 else ("theirs", "ours")):
                run = root / f"{who}-{i}"
                with running_server(run / "data", "--log-level", "warning") as srv:
                    token = srv.token("write")
                    out = run / "out.bin"
                    if who == "ours":
                        up, down = _ours(srv.url, token, src, out, run / "cache")
                    else:
                        up, down = _theirs(srv.url, token, src, out, run)
                    if subprocess.run(["cmp", "-s", str(src), str(out)]).returncode != 0:
                        print(f"MISMATCH in {who}'s round trip", file=sys.stderr)
                        return 1
                    out.unlink()
                times[f"{who}_up"].append(up)
                times[f"{who}_down"].append(down)
        for _ in range(max(5, args.repeats)):
            agent, bare = _startup()
            times["agent_init"].append(agent)
            times["python_pass"].append(bare)
    med = {k: statistics.median(v) for k, v in times.items()}
    mib = args.size_mib
    print(f"{mib} MiB through `git xet serve` on 127.0.0.1, median of {args.repeats}, {os.cpu_count()} cores")
    print(f"{'':<10}{'git-xet s':>10}{'MiB/s':>8}{'hf-xet s':>10}{'MiB/s':>8}{'ratio':>8}")
    for phase in ("up", "down"):
        o, t = med[f"ours_{phase}"], med[f"theirs_{phase}"]
        print(f"{'upload' if phase == 'up' else 'download':<10}{o:>10.2f}{mib / o:>8.0f}{t:>10.2f}{mib / t:>8.0f}{o / t:>8.2f}")
    print(f"agent init {1000 * med['agent_init']:.0f} ms vs python -c pass {1000 * med['python_pass']:.0f} ms: {med['agent_init'] / med['python_pass']:.2f}x (target <= 2x)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"size_mib": mib, "repeats": args.repeats, "median_seconds": med}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
