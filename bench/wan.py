"""Push and clone over a shaped link: git-xet vs stock git-lfs `basic`, same files, same run.

    python bench/wan.py [--mbit 100] [--rtt-ms 40] [--file-mib 256] [--model-mib N] [--small-files 200] [--repeats 3] [--json OUT]

Each tool's server sits behind bench/shaping_proxy.py on 127.0.0.1 (both directions limited
to --mbit, --rtt-ms added per round trip); git talks only to the proxy. Per repeat and tool,
with fresh servers, HOME and caches:
  new:      push a new --file-mib random file, then clone it (smudge downloads it); for
            git-xet, clone it again with upstream's download design as git-lfs's agent
            (ranged_basic_agent.py: up to 8 ranged GETs of the basic URL, same proxy and server)
  v2:       push a v2 of that file, 1% edited in ten places plus a 1 KiB insertion
  model:    push a --model-mib (default: --file-mib) model-like file (bf16 weights,
            common.write_model_like_file) into a fresh repository, then clone it; for git-xet,
            clone it again with upstream's download design, as for `new`
  small:    push --small-files files of 1-64 KiB into a fresh repository, then clone them
Reports medians of wall time and ratios (git-xet / git-lfs), and the proxy's CPU use over
each phase (user + sys seconds per wall second): well under one core means the proxy is not
what limits the figures.

Why the random file ties: over a shaped link a transfer of new data is link-bound, and random
bytes neither compress nor dedup, so every design sends the same bytes at the same line rate
(our clone and upstream's 8 ranged GETs both fill the link; a clone tied at 1.02x). XET's
design wins on a link only where it sends fewer bytes: a v2 (dedup: only changed chunks go
up) and data that compresses, as model weights in bf16 do (BG4 LZ4, ~13% fewer bytes, which
ranged GETs of the basic URL, answered with the file's plain bytes, cannot save). The model
rows show that, with the bytes the server stored for the model file.
"""

from __future__ import annotations

import argparse
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, compile_bytecode, edit_file, machine, median, process_cpu, timed, write_json, write_model_like_file, write_random_file
from git_e2e import plain_lfs_server

import ranged_basic_agent

from tests.support.gitenv import GitEnv, make_git_env
from tests.support.objects import stored_objects
from tests.support.server_process import running_server

TOOLS = ("git-xet", "git-lfs")
PHASES = ("push", "clone", "push_v2", "push_model", "clone_model", "push_small", "clone_small")
# git-xet's server only: upstream's download design as git-lfs's agent (ranged_basic_agent.py)
RANGED_CLONE = "clone_ranged_basic"
RANGED_CLONE_MODEL = "clone_model_ranged_basic"


@contextmanager
def shaping_proxy(target_url: str, mbit: float, rtt_ms: float, max_seconds: float) -> Iterator[tuple[str, int]]:
    """The proxy in front of `target_url`'s port: (its URL, its pid)."""
    port = int(target_url.rsplit(":", 1)[1].split("/")[0])
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).parent / "shaping_proxy.py"), str(port), "--mbit", str(mbit), "--rtt-ms", str(rtt_ms), "--max-seconds", str(max_seconds)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        if not url.startswith("http://127.0.0.1:"):
            raise RuntimeError("the shaping proxy did not start")
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def shaped_remote(tool: str, root: Path, genv: GitEnv, mbit: float, rtt_ms: float) -> Iterator[tuple[int, tuple[str, str] | None]]:
    """Point `genv`'s git at `tool`'s fresh server through a shaping proxy; yields the proxy pid
    and, for git-xet, the proxy's URL and a read token (for the ranged basic baseline). The
    git-xet server keeps its data in `root`/server/data (xorb_bytes reads it)."""
    if tool == "git-xet":
        with running_server(root / "server" / "data") as srv, shaping_proxy(srv.url, mbit, rtt_ms, 3600) as (url, pid):
            genv.git_xet("install", "--standalone", url)
            genv.git("config", "--global", "xet.token", srv.token("write"))
            yield pid, (url, srv.token("read"))
    else:
        with plain_lfs_server(root / "lfs-server") as (server_url, _log, _pid), shaping_proxy(server_url, mbit, rtt_ms, 3600) as (url, pid):
            genv.git("lfs", "install")
            genv.git("config", "--global", "lfs.url", f"{url}/bench.git/info/lfs")
            yield pid, None


def _new_repo(genv: GitEnv, work: Path, remote: Path, files: list[Path]) -> None:
    genv.git("init", "-q", "--bare", str(remote))
    genv.git("init", "-q", str(work))
    genv.git("lfs", "track", "*.bin", cwd=work)
    for src in files:
        shutil.copyfile(src, work / src.name)
    genv.git("add", ".", cwd=work)
    genv.git("commit", "-qm", "v1", cwd=work)
    genv.git("remote", "add", "origin", str(remote), cwd=work)


def _same_files(files: list[Path], clone: Path, tool: str) -> None:
    for src in files:
        if src.read_bytes() != (clone / src.name).read_bytes():
            raise RuntimeError(f"{tool}: the clone's {src.name} differs from what was pushed")


def xorb_bytes(root: Path) -> int:
    """Bytes of the xorbs git-xet's server under `root` stores (compressed chunks)."""
    return sum(stored_objects(root / "server" / "data", "xorbs/").values())


def run_tool(tool: str, root: Path, big: Path, model: Path, small: list[Path], mbit: float, rtt_ms: float) -> dict:
    genv = make_git_env(root)
    result: dict = {}
    with shaped_remote(tool, root, genv, mbit, rtt_ms) as (proxy_pid, ranged):

        def phase(name: str, cmd: list[str], cwd: Path) -> None:
            cpu0 = process_cpu(proxy_pid)
            run = timed(cmd, cwd=cwd, env=genv.env, stderr_to=root / f"{name}.stderr")
            result[name] = {"seconds": run["seconds"], "proxy_cpu_per_s": (process_cpu(proxy_pid) - cpu0) / run["seconds"]}

        work = root / "work"
        _new_repo(genv, work, root / "remote.git", [big])
        phase("push", ["git", "push", "-q", "origin", "main"], work)
        phase("clone", ["git", "clone", "-q", str(root / "remote.git"), str(root / "clone")], root)
        _same_files([big], root / "clone", tool)
        token_file = root / "read-token"
        if ranged is not None:  # the same clone through git-lfs with upstream's design: ranged GETs of the basic URL
            token_file.write_text(ranged[1])
            phase(RANGED_CLONE, ranged_basic_agent.clone_command(ranged[0], token_file, root / "remote.git", root / "clone-ranged"), root)
            _same_files([big], root / "clone-ranged", "ranged basic")
        edit_file(work / big.name, seed=7)
        genv.git("commit", "-qam", "v2", cwd=work)
        phase("push_v2", ["git", "push", "-q", "origin", "main"], work)

        weights = root / "weights"
        _new_repo(genv, weights, root / "weights.git", [model])
        stored_before = xorb_bytes(root) if ranged is not None else 0
        phase("push_model", ["git", "push", "-q", "origin", "main"], weights)
        if ranged is not None:
            result["model_xorb_bytes"] = xorb_bytes(root) - stored_before
        phase("clone_model", ["git", "clone", "-q", str(root / "weights.git"), str(root / "weights-clone")], root)
        _same_files([model], root / "weights-clone", tool)
        if ranged is not None:
            phase(RANGED_CLONE_MODEL, ranged_basic_agent.clone_command(ranged[0], token_file, root / "weights.git", root / "weights-ranged"), root)
            _same_files([model], root / "weights-ranged", "ranged basic")

        many = root / "many"
        _new_repo(genv, many, root / "many.git", small)
        phase("push_small", ["git", "push", "-q", "origin", "main"], many)
        phase("clone_small", ["git", "clone", "-q", str(root / "many.git"), str(root / "many-clone")], root)
        _same_files(small, root / "many-clone", tool)
    return result


def run(mbit: float, rtt_ms: float, file_mib: int, model_mib: int, small_files: int, repeats: int) -> dict:
    compile_bytecode()
    results: dict[str, list[dict]] = {t: [] for t in TOOLS}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-wan-") as tmp:
        base = Path(tmp)
        big = base / "model.bin"
        write_random_file(big, file_mib * MIB, seed=1)
        model = base / "weights.bin"
        write_model_like_file(model, model_mib * MIB, seed=3)
        rng = random.Random(2)
        small: list[Path] = []
        small_bytes = 0
        for i in range(small_files):
            small.append(base / "small" / f"f{i:04d}.bin")
            small[-1].parent.mkdir(exist_ok=True)
            small_bytes += small[-1].write_bytes(rng.randbytes(rng.randint(1024, 64 * 1024)))
        for r in range(repeats):
            for tool in TOOLS if r % 2 == 0 else tuple(reversed(TOOLS)):
                root = base / f"{tool}-{r}"
                started = time.monotonic()
                results[tool].append(run_tool(tool, root, big, model, small, mbit, rtt_ms))
                print(f"  {tool} repeat {r + 1}: {time.monotonic() - started:.0f} s", flush=True)
                shutil.rmtree(root, ignore_errors=True)
    summary: dict = {
        "mbit": mbit, "rtt_ms": rtt_ms, "file_mib": file_mib, "model_mib": model_mib, "small_files": small_files,
        "small_mib": small_bytes / MIB,
        "repeats": repeats, "machine": machine(), "tools": {},
    }  # fmt: skip
    for tool, runs in results.items():
        summary["tools"][tool] = {
            phase: {
                "seconds": median([run[phase]["seconds"] for run in runs]),
                "proxy_cpu_per_s": max(run[phase]["proxy_cpu_per_s"] for run in runs),
            }
            for phase in (*PHASES, RANGED_CLONE, RANGED_CLONE_MODEL)
            if all(phase in run for run in runs)
        }
    summary["model_xorb_mib"] = median([run["model_xorb_bytes"] for run in results["git-xet"]]) / MIB
    return summary


TARGETS = {"push": 1.1, "clone": 1.1, "push_v2": 0.1, "push_model": 1.0, "clone_model": 1.0, "push_small": 1.5, "clone_small": 1.5}


def print_table(summary: dict) -> None:
    print(
        f"over {summary['mbit']:g} Mbit/s and {summary['rtt_ms']:g} ms RTT: one {summary['file_mib']} MiB file, its v2, "
        f"a {summary['model_mib']} MiB model-like file (stored as {summary['model_xorb_mib']:.1f} MiB of xorbs), "
        f"{summary['small_files']} small files ({summary['small_mib']:.1f} MiB); median of {summary['repeats']}; {summary['machine']}"
    )
    print(f"{'phase':<12}{'git-xet s':>10}{'git-lfs s':>10}{'ratio':>7}{'target':>8}{'proxy CPU':>11}")
    tools = summary["tools"]
    for phase in PHASES:
        o, b = tools["git-xet"][phase], tools["git-lfs"][phase]
        proxy = max(o["proxy_cpu_per_s"], b["proxy_cpu_per_s"])
        print(f"{phase:<12}{o['seconds']:>10.2f}{b['seconds']:>10.2f}{o['seconds'] / b['seconds']:>7.2f}{'<= ' + str(TARGETS[phase]):>8}{100 * proxy:>10.0f}%")
    for ours, ranged in (("clone", RANGED_CLONE), ("clone_model", RANGED_CLONE_MODEL)):
        if ranged in tools["git-xet"]:
            o, r = tools["git-xet"][ours], tools["git-xet"][ranged]
            print(f"{ours}: git-xet {o['seconds']:.2f} s, upstream's 8 ranged basic GETs to the same server {r['seconds']:.2f} s, ratio {o['seconds'] / r['seconds']:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mbit", type=float, default=100.0)
    parser.add_argument("--rtt-ms", type=float, default=40.0)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--model-mib", type=int, help="size of the model-like file (default: --file-mib)")
    parser.add_argument("--small-files", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    summary = run(args.mbit, args.rtt_ms, args.file_mib, args.model_mib or args.file_mib, args.small_files, args.repeats)
    print_table(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
