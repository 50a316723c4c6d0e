"""Many small LFS files: `git push` and a fresh `git clone` of one commit holding `--files` files
of 4-64 KiB, through git-xet into `git xet serve`, through git-xet into a local directory store,
and through stock git-lfs `basic` to a plain LFS server, in the same run.

    python bench/many_files.py [--files 1000] [--repeats 3] [--tools git-lfs,git-xet,git-xet-local,git-xet-native] [--server-workers 2] [--as-before FACTORS|all] [--json OUT]

By default it does what a user timing the tools does: each tool has one HOME, one server (or
local store) and one shard cache (HOME/.cache/git-xet) that live across the rounds and grow;
each round is a new repository of new random files (seed = round), pushed with `git push` and
cloned with `git clone` on a terminal (under util-linux `script`, so git-lfs draws its meter and
the agent writes its notices and push summary to /dev/tty), with neither $GIT_XET_LOG nor
$GIT_XET_QUIET set. The tools take turns, each round in the other order.

`--as-before` brings back what the bench did before, factor by factor (`all`: every one, the
old isolated runs, useful for regression tracking against bench/HISTORY.md):
    log      $GIT_XET_LOG set: the agents log at DEBUG to a file
    quiet    $GIT_XET_QUIET=1: no terminal notices
    notty    no terminal (output to files), `git push -q`, `git clone -q`
    cache    a fresh, empty shard cache per run
    server   a fresh HOME, server and store per run
    files    the same files (seed 0) in every run (only meaningful with `server`: a server
             that lives across rounds already holds them)
    fsync    the git-lfs baseline's server fsyncs each object and its directory before it
             answers (lfs_basic_server.py; by default --no-fsync, as the LFS servers users run)

Besides wall seconds, each phase reports the CPU seconds (user + sys) of the client (git and
every process it started: git-lfs, the agents) and of the server process (none for the local
store, whose agents do the storing). Wall time moves with whatever else the machine runs; the
CPU figures much less.

Per-object costs dominate here (requests, git subprocesses, fsyncs, agent work), not bytes:
the targets are git-xet within 1.5x of git-lfs through the server and 1.2x through the local
store, each of git-xet's objects still durable before git-lfs is told it is complete (the
baseline's server, like the Gitea a user runs, answers before its file is synced).
"""

from __future__ import annotations

import argparse
import random
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import children_cpu, compile_bytecode, lfs_repo_with, machine, median, process_cpu, timed, write_json
from git_e2e import plain_lfs_server

from tests.support.gitenv import GitEnv, make_git_env
from git_xet.server.workers import DEFAULT_WORKERS
from tests.support.server_process import running_server

TOOLS = ("git-lfs", "git-xet", "git-xet-local", "git-xet-native")
DEFAULT_TOOLS = TOOLS[:3]  # git-xet-native (install --native against the Hub emulation): on request
FACTORS = ("log", "quiet", "notty", "cache", "server", "files", "fsync")
KIB = 1024


@contextmanager
def remote_for(tool: str, root: Path, genv: GitEnv, server_workers: int | None = None, basic_options: tuple[str, ...] = ()) -> Iterator[int | None]:
    """Configure `genv` for `tool`'s remote (`basic_options`: lfs_basic_server.py's); yields the
    server's pid (None: no server)."""
    if tool == "git-xet":
        with running_server(root / "server" / "data", "--workers", str(server_workers or DEFAULT_WORKERS)) as srv:
            genv.git_xet("install", "--standalone", srv.url)
            genv.git("config", "--global", "xet.token", srv.token("write"))
            yield srv.process.pid
    elif tool == "git-xet-native":  # `install --native`: our agent's own LFS batch calls to the server's Hub emulation
        with running_server(root / "server" / "data", "--workers", str(server_workers or DEFAULT_WORKERS)) as srv:
            genv.git_xet("install", "--native", srv.url)
            token = srv.token("write", repo="bench/many")
            genv.use_credentials(token)
            genv.git("config", "--global", "lfs.url", f"{srv.url}/bench/many.git/info/lfs")
            yield srv.process.pid
    elif tool == "git-xet-local":
        genv.git_xet("install", "--standalone", str(root / "store"))
        yield None
    else:
        with plain_lfs_server(root / "lfs-server", basic_options) as (url, _log, pid):
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


class Session:
    """One tool's user: a HOME (its git config, and its shard cache unless `cache` is as before)
    and a running server or store, for one run (`server` as before) or every round."""

    def __init__(self, tool: str, root: Path, before: frozenset[str], server_workers: int | None) -> None:
        self.tool, self.root, self.before = tool, root, before
        self._stack = ExitStack()
        self.genv = make_git_env(root)
        env = self.genv.env
        if "log" not in before:
            env.pop("GIT_XET_LOG")
        if "quiet" not in before:
            env.pop("GIT_XET_QUIET")
        if "cache" not in before:
            env.pop("GIT_XET_CACHE")  # the default, HOME/.cache/git-xet
            env["XDG_CACHE_HOME"] = str(root / "home" / ".cache")  # not the real user's
        basic = () if "fsync" in before else ("--no-fsync",)
        self.server_pid = self._stack.enter_context(remote_for(tool, root, self.genv, server_workers, basic))

    def close(self) -> None:
        self._stack.close()

    def command(self, phase: str, run_root: Path) -> list[str]:
        quiet = ["-q"] if "notty" in self.before else []
        cmd = ["git", "push", *quiet, "origin", "main"] if phase == "push" else ["git", "clone", *quiet, str(run_root / "remote.git"), str(run_root / "clone")]
        if "notty" in self.before:
            return cmd
        return ["script", "-qec", shlex.join(cmd), "/dev/null"]  # a pseudo-terminal, as tests/integration/test_cli_config.py's _on_a_terminal


def run_round(session: Session, run_root: Path, sources: list[Path]) -> dict[str, dict[str, float]]:
    """Push a new repository of `sources` and clone it: {phase: {measure: value}}."""
    genv = session.genv
    if "cache" in session.before:
        genv.env["GIT_XET_CACHE"] = str(run_root / "xet-cache")
    run_root.mkdir(parents=True, exist_ok=True)
    work = lfs_repo_with(genv, run_root, sources)
    measured: dict[str, dict[str, float]] = {}
    for phase in PHASES:
        cwd = work if phase == "push" else run_root
        pid = session.server_pid
        server0 = process_cpu(pid) if pid else 0.0
        client0 = children_cpu()
        wall = timed(session.command(phase, run_root), cwd=cwd, env=genv.env, stderr_to=run_root / f"{phase}.stderr")["seconds"]
        client = children_cpu() - client0
        server = process_cpu(pid) - server0 if pid else 0.0
        measured[phase] = {"seconds": wall, "client_cpu": client, "server_cpu": server}
    for src in sources:
        if (run_root / "clone" / src.name).read_bytes() != src.read_bytes():
            raise RuntimeError(f"{session.tool}: the clone's {src.name} differs from what was pushed")
    return measured


def run(files: int, repeats: int, tools: tuple[str, ...], server_workers: int | None = None, before: frozenset[str] = frozenset()) -> dict:
    compile_bytecode()
    results: dict[str, list[dict[str, dict[str, float]]]] = {t: [] for t in tools}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-files-") as tmp, ExitStack() as lasting:
        base = Path(tmp)
        sessions: dict[str, Session] = {}
        if "server" not in before:
            for tool in tools:
                sessions[tool] = Session(tool, base / tool, before, server_workers)
                lasting.callback(sessions[tool].close)
        for r in range(repeats):
            seed = 0 if "files" in before else r
            directory = base / f"sources-{seed}"
            sources = sorted(directory.iterdir()) if directory.exists() else make_files(directory, files, seed)
            order = tools if r % 2 == 0 else tuple(reversed(tools))
            for tool in order:
                if "server" in before:
                    session = Session(tool, base / f"{tool}-{r}", before, server_workers)
                    try:
                        results[tool].append(run_round(session, session.root / "run", sources))
                    finally:
                        session.close()
                    shutil.rmtree(session.root, ignore_errors=True)
                else:
                    run_root = sessions[tool].root / f"round-{r}"
                    results[tool].append(run_round(sessions[tool], run_root, sources))
                    shutil.rmtree(run_root, ignore_errors=True)  # the repositories; the server, store and cache stay
    summary: dict = {"files": files, "repeats": repeats, "server_workers": server_workers or DEFAULT_WORKERS, "as_before": sorted(before), "machine": machine(), "tools": {}}
    for tool, runs in results.items():
        summary["tools"][tool] = {phase: median([run[phase]["seconds"] for run in runs]) for phase in PHASES}
        summary["tools"][tool]["cpu"] = {
            phase: {measure: median([run[phase][measure] for run in runs]) for measure in MEASURES[1:]} for phase in PHASES
        }
        summary["tools"][tool]["rounds"] = runs  # in order: whether the lasting server, store and cache slow later rounds
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
    before = ", ".join(summary.get("as_before", [])) or "none (as a user)"
    print(f"{summary['files']} LFS files of 4-64 KiB, push and fresh clone, median of {summary['repeats']}; server workers: {workers}; as before: {before}; {summary['machine']}")
    print(f"{'tool':<15}{'push s':>8}{'clone s':>9}{'push ratio':>12}{'clone ratio':>13}   CPU s, client + server: push / clone")
    for tool, m in summary["tools"].items():
        ratio = m.get("ratio", {})
        push_r = f"{ratio['push']:.2f}" if ratio else "-"
        clone_r = f"{ratio['clone']:.2f}" if ratio else "-"
        cpu = " / ".join(f"{m['cpu'][phase]['client_cpu']:.2f} + {m['cpu'][phase]['server_cpu']:.2f}" for phase in PHASES)
        print(f"{tool:<15}{m['push']:>8.2f}{m['clone']:>9.2f}{push_r:>12}{clone_r:>13}   {cpu}")


def parse_factors(text: str) -> frozenset[str]:
    """`--as-before`'s comma list (or `all`) as a set of FACTORS; ValueError names an unknown one."""
    chosen = set(FACTORS) if text.strip() == "all" else {f.strip() for f in text.split(",") if f.strip()}
    if unknown := chosen - set(FACTORS):
        raise ValueError(f"unknown --as-before factors: {', '.join(sorted(unknown))} (known: {', '.join(FACTORS)}, or all)")
    return frozenset(chosen)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tools", default=",".join(DEFAULT_TOOLS), help=f"of {','.join(TOOLS)}")
    parser.add_argument("--server-workers", type=int, default=DEFAULT_WORKERS, help="git xet serve --workers (default: its default, %(default)s here)")
    parser.add_argument("--as-before", default="", metavar="FACTORS", help=f"what the bench did before, factor by factor ({', '.join(FACTORS)}) or all")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tools = tuple(t for t in args.tools.split(",") if t)
    if unknown := set(tools) - set(TOOLS):
        parser.error(f"unknown tools: {', '.join(sorted(unknown))}")
    try:
        before = parse_factors(args.as_before)
    except ValueError as exc:
        parser.error(str(exc))
    summary = run(args.files, args.repeats, tools, args.server_workers, before)
    print_table(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
