"""Many small LFS files: `git push` and a fresh `git clone` of one commit holding `--files` files
of 4-64 KiB, through git-xet into `git xet serve`, through git-xet into a local directory store,
and through stock git-lfs `basic` to a plain LFS server, same files, same run.

    python bench/many_files.py [--files 1000] [--repeats 3] [--tools git-lfs,git-xet,git-xet-local,git-xet-native] [--server-workers 2] [--json OUT]

Besides wall seconds, each phase reports the CPU seconds (user + sys) of the client (git and
every process it started: git-lfs, the agents) and of the server process (none for the local
store, whose agents do the storing).

Per-object costs dominate here (requests, git subprocesses, fsyncs, agent work), not bytes:
the targets are git-xet within 1.5x of git-lfs through the server and 1.2x through the local
store, each object still durable before git-lfs is told it is complete.
"""

from __future__ import annotations

import argparse
import compileall
import random
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import children_cpu, lfs_repo_with, machine, median, process_cpu, timed, write_json
from git_e2e import plain_lfs_server

from tests.support.gitenv import GitEnv, make_git_env
from git_xet.server.workers import default_workers
from tests.support.server_process import running_server

TOOLS = ("git-lfs", "git-xet", "git-xet-local", "git-xet-native")
DEFAULT_TOOLS = TOOLS[:3]  # git-xet-native (install --native against the Hub emulation): on request
KIB = 1024


@contextmanager
def remote_for(tool: str, root: Path, genv: GitEnv, server_workers: int | None = None) -> Iterator[int | None]:
    """Configure `genv` for `tool`'s remote; yields the server's pid (None: no server)."""
    if tool == "git-xet":
        with running_server(root / "server" / "data", "--workers", str(server_workers or default_workers())) as srv:
            genv.git_xet("install", "--standalone", srv.url)
            genv.git("config", "--global", "xet.token", srv.token("write"))
            yield srv.process.pid
    elif tool == "git-xet-native":  # `install --native`: our agent's own LFS batch calls to the server's Hub emulation
        with running_server(root / "server" / "data", "--workers", str(server_workers or default_workers())) as srv:
            genv.git_xet("install", "--native", srv.url)
            token = srv.token("write", repo="bench/many")
            genv.git("config", "--global", "credential.helper", f"!f() {{ echo username=user; echo password={token}; }}; f")
            genv.git("config", "--global", "lfs.url", f"{srv.url}/bench/many.git/info/lfs")
            yield srv.process.pid
    elif tool == "git-xet-local":
        genv.git_xet("install", "--standalone", str(root / "store"))
        yield None
    else:
        with plain_lfs_server(root / "lfs-server") as (url, _log, pid):
            genv.git("lfs", "install")
            genv.git("config", "--global", "lfs.url", f"{url}/bench.git/info/lfs")
            yield pid


def make_files(directory: Path, count: int, seed: int = 0) -> list[Path]:
    rng = random.Random(seed)
    directory.mkdir(parents=True)
    paths = []
    for i in range(count):
        paths.append(directory / f"f{i:05d}.bin")
        paths[-1].write_bytes(rng.randbytes(rng.randint(4 * KIB, 64 * KIB)))
    return paths


PHASES = ("push", "clone")
MEASURES = ("seconds", "client_cpu", "server_cpu")


def run_tool(tool: str, root: Path, sources: list[Path], server_workers: int | None = None) -> dict[str, dict[str, float]]:
    genv = make_git_env(root)
    commands = {
        "push": (["git", "push", "-q", "origin", "main"], None),
        "clone": (["git", "clone", "-q", str(root / "remote.git"), str(root / "clone")], root),
    }
    measured: dict[str, dict[str, float]] = {}
    with remote_for(tool, root, genv, server_workers) as server_pid:
        work = lfs_repo_with(genv, root, sources)
        for phase in PHASES:
            cmd, cwd = commands[phase]
            server0 = process_cpu(server_pid) if server_pid else 0.0
            client0 = children_cpu()
            wall = timed(cmd, cwd=cwd or work, env=genv.env, stderr_to=root / f"{phase}.stderr")["seconds"]
            client = children_cpu() - client0
            server = process_cpu(server_pid) - server0 if server_pid else 0.0
            measured[phase] = {"seconds": wall, "client_cpu": client, "server_cpu": server}
        for src in sources:
            if (root / "clone" / src.name).read_bytes() != src.read_bytes():
                raise RuntimeError(f"{tool}: the clone's {src.name} differs from what was pushed")
    return measured


def compile_bytecode() -> None:
    """Byte-compile git_xet as installing a wheel does. Python writes the .pyc files on first
    import too, unless PYTHONDONTWRITEBYTECODE is set (as in some CI and sandbox shells): then
    every one of the eight agents git-lfs starts would compile ~100 modules from source, a cost
    no installed copy pays."""
    import git_xet

    compileall.compile_dir(Path(git_xet.__file__).parent, quiet=1)


def run(files: int, repeats: int, tools: tuple[str, ...], server_workers: int | None = None) -> dict:
    compile_bytecode()
    results: dict[str, list[dict[str, dict[str, float]]]] = {t: [] for t in tools}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-files-") as tmp:
        base = Path(tmp)
        sources = make_files(base / "sources", files)
        for r in range(repeats):
            order = tools if r % 2 == 0 else tuple(reversed(tools))
            for tool in order:
                root = base / f"{tool}-{r}"
                results[tool].append(run_tool(tool, root, sources, server_workers))
                shutil.rmtree(root, ignore_errors=True)
    summary: dict = {"files": files, "repeats": repeats, "server_workers": server_workers or default_workers(), "machine": machine(), "tools": {}}
    for tool, runs in results.items():
        summary["tools"][tool] = {phase: median([run[phase]["seconds"] for run in runs]) for phase in PHASES}
        summary["tools"][tool]["cpu"] = {
            phase: {measure: median([run[phase][measure] for run in runs]) for measure in MEASURES[1:]} for phase in PHASES
        }
    if "git-lfs" in results:
        base_runs = results["git-lfs"]
        for tool in results:
            if tool != "git-lfs":
                summary["tools"][tool]["ratio"] = {
                    phase: median([ours[phase]["seconds"] / theirs[phase]["seconds"] for ours, theirs in zip(results[tool], base_runs)]) for phase in PHASES
                }
    return summary


def print_table(summary: dict) -> None:
    workers = summary.get("server_workers", 1)
    print(f"{summary['files']} LFS files of 4-64 KiB, push and fresh clone, median of {summary['repeats']}; server workers: {workers}; {summary['machine']}")
    print(f"{'tool':<15}{'push s':>8}{'clone s':>9}{'push ratio':>12}{'clone ratio':>13}   CPU s, client + server: push / clone")
    for tool, m in summary["tools"].items():
        ratio = m.get("ratio", {})
        push_r = f"{ratio['push']:.2f}" if ratio else "-"
        clone_r = f"{ratio['clone']:.2f}" if ratio else "-"
        cpu = " / ".join(f"{m['cpu'][phase]['client_cpu']:.2f} + {m['cpu'][phase]['server_cpu']:.2f}" for phase in PHASES)
        print(f"{tool:<15}{m['push']:>8.2f}{m['clone']:>9.2f}{push_r:>12}{clone_r:>13}   {cpu}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tools", default=",".join(DEFAULT_TOOLS), help=f"of {','.join(TOOLS)}")
    parser.add_argument("--server-workers", type=int, default=default_workers(), help="git xet serve --workers (default: its default, %(default)s here)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tools = tuple(t for t in args.tools.split(",") if t)
    if unknown := set(tools) - set(TOOLS):
        parser.error(f"unknown tools: {', '.join(sorted(unknown))}")
    summary = run(args.files, args.repeats, tools, args.server_workers)
    print_table(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
