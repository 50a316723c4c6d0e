"""Upload/download throughput and CPU, and agent start-up: git-xet vs hf-xet, same data, same run.

    python bench/transfer.py [--size-mib 1024] [--repeats 3] [--json OUT]

For each repeat, a fresh `git xet serve` on 127.0.0.1 and fresh caches: git-xet uploads the
file, hf-xet uploads the same file to another fresh server (no dedup between them), then each
downloads its own upload back. git-xet runs twice: as its users get it (the backend that `git
push` to a `git xet serve` and `git_xet.open_store(url)` open, which asks the server what it
offers: upload streams let the server hash the file's sha256 while its xorbs arrive), and on
the XET API alone (as against the Hub's CAS, where the server hashes the file after its last
xorb, as it does for hf-xet). Every upload and download runs in a process of its own, so
its CPU (user + sys, all threads, interpreter start-up included for both clients) is measured
exactly, with getrusage(RUSAGE_CHILDREN); the server's CPU per phase is read from /proc, and
how long it took to answer the upload's shard (what a client waits for after its last xorb)
from its access log. Also times the agent from spawn to its `init` answer against a bare `python -c pass`,
and its answer to its first request (see _startup). Prints
medians and ratios (ours/theirs: <= 1.0 means at least as fast, or as frugal).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "bench"))

from common import children_cpu, process_cpu, settle_disk  # noqa: E402

from tests.support import hf_xet_oracle  # noqa: E402
from tests.support.server_process import running_server  # noqa: E402

_OURS = r"""
import sys, json, os
from pathlib import Path
from git_xet.platform.memory import tune_allocator
from git_xet.client.backends import open_backend
from git_xet.client.location import StoreLocation
from git_xet.client.tokens import StaticToken
from git_xet.client.shard_cache import ShardCache
tune_allocator()
phase, url, src, out, cache, api = sys.argv[1:7]
# "http": what the agent and open_store open for a `git xet serve` URL; "cas": the XET API
# alone, as for a CAS an LFS server names (the Hub's). One factory, as the agent's.
kind = "cas" if api == "xet" else "http"
backend = open_backend(StoreLocation(kind, url), tokens=StaticToken(os.environ["GIT_XET_BENCH_TOKEN"]))
if phase == "up":
    from git_xet.pipelines.upload import Uploader
    with Uploader(backend, ShardCache(Path(cache), backend.cache_key)) as up:
        r = up.add_file(src)
        up.finalize()
    info = {"hash": r.file_hex, "size": r.size, "sha256": r.sha256_hex}
else:
    from git_xet.pipelines.download import download_to_path
    info = json.loads(src)
    # As the agent downloads inside `git clone`: every chunk's BLAKE3 and the file hash checked,
    # the sha256 left to git-lfs, no fsync (git-lfs moves the file; hf-xet syncs nothing either).
    download_to_path(backend, info["hash"], Path(out), size=info["size"], durable=False)
print(json.dumps(info))
"""


def measured(server_pid: int, fn: Callable[[], tuple[float, Any]]) -> tuple[dict, Any]:
    """Run one client process through `fn`: its wall seconds, its CPU and the server's CPU."""
    settle_disk()
    client0, server0 = children_cpu(), process_cpu(server_pid)
    seconds, result = fn()
    return {"seconds": seconds, "client_cpu": children_cpu() - client0, "server_cpu": process_cpu(server_pid) - server0}, result


def _ours(phase: str, url: str, token: str, arg: str, out: Path, cache: Path, api: str) -> tuple[float, dict]:
    """Our client's phase in a process of its own, timed as hf-xet's is: the whole process,
    interpreter start-up and imports included. `api`: "store" (as users get it) or "xet"."""
    t = time.perf_counter()
    # The token travels in the environment: a failed command line must not print it.
    proc = subprocess.run(
        [sys.executable, "-c", _OURS, phase, url, arg, str(out), str(cache), api],
        capture_output=True, text=True, env=dict(os.environ, GIT_XET_BENCH_TOKEN=token), check=False,
    )  # fmt: skip
    if proc.returncode:
        raise RuntimeError(f"git-xet {phase} failed:\n{proc.stderr[-3000:]}")
    seconds = time.perf_counter() - t
    return seconds, json.loads(proc.stdout)


def _theirs_up(url: str, token: str, src: Path, work: Path) -> tuple[float, dict]:
    t = time.perf_counter()
    (info,) = hf_xet_oracle.remote_upload([src], url, token, work / "up")
    return time.perf_counter() - t, info


def _theirs_down(url: str, token: str, info: dict, out: Path, work: Path) -> tuple[float, None]:
    t = time.perf_counter()
    hf_xet_oracle.remote_download([(out, info["hash"], info["size"])], url, token, work / "down")
    return time.perf_counter() - t, None


def _startup() -> tuple[float, float, float]:
    """Seconds from spawning the agent to its `init` answer, then from its first request to
    that request's answer, and of a bare `python -c pass`. The agent is the command `git xet
    install` registers, run as git-lfs runs it (`sh -c "'<path>' <args>"`): launch.sh answers
    `init` and starts Python with the first request, so that is when an agent given an object
    pays Python's start-up. The request is one the agent refuses (an oid that is no oid) before
    it imports anything for a transfer: the start-up, not a transfer."""
    from git_xet.commands.install import agent_command

    path, args = agent_command()
    init = json.dumps({"event": "init", "operation": "upload", "remote": "origin", "concurrent": True, "concurrenttransfers": 8}, separators=(",", ":"))
    request = json.dumps({"event": "upload", "oid": "not-an-oid", "size": 1, "path": "x"}, separators=(",", ":"))
    t = time.perf_counter()
    proc = subprocess.Popen(["sh", "-c", f"{shlex.quote(path)} {args}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(init + "\n")
    proc.stdin.flush()
    if proc.stdout.readline().strip() != "{}":
        raise RuntimeError("the agent did not answer init")
    agent = time.perf_counter() - t
    t = time.perf_counter()
    proc.stdin.write(request + "\n")
    proc.stdin.flush()
    if '"error"' not in proc.stdout.readline():
        raise RuntimeError("the agent did not refuse a request for no oid")
    first_answer = time.perf_counter() - t
    proc.stdin.close()
    proc.wait()
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return agent, first_answer, time.perf_counter() - t


SHARD_PATHS = ("/v1/shards", "/v2/shards", "/git-xet/v1/upload-bundles", "/v1/xorbs-and-shard")


def shard_wait_ms(access_log: str) -> float:
    """How long the server took to answer the upload's shard (the last one in the access log):
    what the client waits for after its last xorb, the server's sha256 pass included."""
    answers = []
    for line in access_log.splitlines():
        if '"path": ' in line:
            record = json.loads(line.split(" ", 3)[-1])
            if record["path"].removeprefix("/api") in SHARD_PATHS:
                answers.append(record["ms"])
    return answers[-1]


# Our client's runs: "ours" as users get it, "ours_xet" on the XET API alone.
OURS_APIS = {"ours": "store", "ours_xet": "xet"}


def round_trip(who: str, src: Path, run: Path) -> dict[str, dict]:
    """Upload `src` with one client to a fresh server, download it back, check the bytes."""
    with running_server(run / "data") as srv:  # info: the access log's lines time the shard
        token = srv.token("write")
        out = run / "out.bin"
        pid = srv.process.pid
        if who in OURS_APIS:
            api = OURS_APIS[who]
            up, info = measured(pid, lambda: _ours("up", srv.url, token, str(src), out, run / "cache", api))
            up["shard_ms"] = shard_wait_ms(srv.log())
            down, _ = measured(pid, lambda: _ours("down", srv.url, token, json.dumps(info), out, run / "cache", api))
        else:
            up, info = measured(pid, lambda: _theirs_up(srv.url, token, src, run))
            up["shard_ms"] = shard_wait_ms(srv.log())
            down, _ = measured(pid, lambda: _theirs_down(srv.url, token, info, out, run))
        if subprocess.run(["cmp", "-s", str(src), str(out)], check=False).returncode != 0:
            raise RuntimeError(f"MISMATCH in {who}'s round trip")
        out.unlink()
    return {"up": up, "down": down}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-") as tmp:
        root = Path(tmp)
        src = root / "data.bin"
        with open(src, "wb") as f:
            for left in range(args.size_mib << 20, 0, -(64 << 20)):
                f.write(os.urandom(min(64 << 20, left)))
        for i in range(args.repeats):
            for who in (("ours", "theirs", "ours_xet") if i % 2 == 0 else ("ours_xet", "theirs", "ours")):
                for phase, m in round_trip(who, src, root / f"{who}-{i}").items():
                    samples.setdefault(f"{who}_{phase}", []).append(m["seconds"])
                    samples.setdefault(f"{who}_{phase}_cpu", []).append(m["client_cpu"])
                    samples.setdefault(f"{who}_{phase}_server_cpu", []).append(m["server_cpu"])
                    if "shard_ms" in m:
                        samples.setdefault(f"{who}_shard_ms", []).append(m["shard_ms"])
        for _ in range(max(5, args.repeats)):
            agent, first_answer, bare = _startup()
            samples.setdefault("agent_init", []).append(agent)
            samples.setdefault("agent_first_answer", []).append(first_answer)
            samples.setdefault("python_pass", []).append(bare)
    med = {k: statistics.median(v) for k, v in samples.items()}
    mib = args.size_mib
    gib = mib / 1024
    print(f"{mib} MiB through `git xet serve` on 127.0.0.1, median of {args.repeats}, {os.cpu_count()} cores")
    print(f"{'':<10}{'git-xet s':>10}{'MiB/s':>8}{'hf-xet s':>10}{'MiB/s':>8}{'ratio':>7}  {'client CPU s/GiB':>22}{'ratio':>7}  {'server CPU s/GiB':>18}")
    for who, heading in (("ours", None), ("ours_xet", "XET API only: our client with no extension, as against the Hub's CAS")):
        if heading:
            print(heading)
        for phase in ("up", "down"):
            o, t = med[f"{who}_{phase}"], med[f"theirs_{phase}"]
            oc, tc = med[f"{who}_{phase}_cpu"] / gib, med[f"theirs_{phase}_cpu"] / gib
            os_, ts = med[f"{who}_{phase}_server_cpu"] / gib, med[f"theirs_{phase}_server_cpu"] / gib
            name = "upload" if phase == "up" else "download"
            print(f"{name:<10}{o:>10.2f}{mib / o:>8.0f}{t:>10.2f}{mib / t:>8.0f}{o / t:>7.2f}  {oc:>10.2f} vs {tc:>8.2f}{oc / tc:>7.2f}  {os_:>7.2f} vs {ts:>7.2f}")
    print(
        f"server's answer to the upload's shard, after the last xorb: {med['ours_shard_ms']:.0f} ms (XET API only: "
        f"{med['ours_xet_shard_ms']:.0f} ms) vs hf-xet's {med['theirs_shard_ms']:.0f} ms"
    )
    print(f"agent init {1000 * med['agent_init']:.0f} ms vs python -c pass {1000 * med['python_pass']:.0f} ms: {med['agent_init'] / med['python_pass']:.2f}x (target <= 2x)")
    print(f"agent's answer to its first request (Python starts then): {1000 * med['agent_first_answer']:.0f} ms")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"size_mib": mib, "repeats": args.repeats, "median_seconds": med, "samples": samples}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
