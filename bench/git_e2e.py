"""Git end to end: `git push`, `git clone` and a v2 push through our agent and `git xet serve`
vs stock git-lfs `basic` transfers to a plain LFS server, same files, same run.

    python bench/git_e2e.py [--files 3] [--file-mib 256] [--repeats 3] [--clones 1] [--tools git-xet,git-lfs] [--json OUT]

Tools: `git-xet` (our agent and `git xet serve`), `git-lfs` (basic transfers to
lfs_basic_server.py, which stores what it is sent unchecked) and `git-lfs-checked` (the same,
the server refusing an upload whose sha256 is not its oid, as `git xet serve` checks each
oid a shard claims: what that check costs each side).

Each repeat starts fresh servers, a fresh HOME and fresh caches, and each timed phase starts
with the page cache written back (common.timed). Per tool: push v1 of
`--files` random files, clone it `--clones` times into a fresh directory (smudge downloads
everything: neither tool keeps a download cache), then push v2 with one file edited (1% in
ten places plus a 1 KiB insertion). For git-xet, the same `--clones` clones are then made with
upstream's git-xet download design as git-lfs's standalone agent (ranged_basic_agent.py: up to
8 ranged GETs of the basic URL per object, same server), the row "ranged basic". The tools
take turns, each repeat starting one tool later (turn_order). One clone here varies by +-10-25% from the next, so with the two tools at about the
same time a median of three cannot tell which is faster; `--clones 3` gives each tool nine
clones in three runs. Reports median wall time (over every clone), CPU seconds
(user + sys) of the git command's whole process tree (git, git-lfs, our agents) and of the
server, object bytes the server received (pushes) or sent (clone) and, with --agent-rss, our
agents' peak RSS.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, compile_bytecode, RequestLog, children_cpu, edit_file, lfs_repo_with, machine, median, model_files, process_cpu, timed, write_json

import ranged_basic_agent

from tests.support.gitenv import agent_peak_rss, make_git_env, record_agent_rss
from git_xet.server.workers import DEFAULT_WORKERS
from tests.support.server_process import running_server

TOOLS = ("git-xet", "git-lfs")
BASIC_SERVERS: dict[str, tuple[str, ...]] = {"git-lfs": (), "git-lfs-checked": ("--verify-sha256",)}  # tool -> lfs_basic_server.py options
RANGED_CLONE = "clone_ranged_basic"  # git-xet's server, cloned through git-lfs with upstream's download design (ranged_basic_agent.py)
PHASE_KEYS = ("seconds", "client_cpu", "server_cpu", "bytes_in", "bytes_out", "agent_peak_rss_mib")


@contextmanager
def plain_lfs_server(data: Path, options: tuple[str, ...] = ()) -> Iterator[tuple[str, RequestLog, int]]:
    data.mkdir(parents=True)
    proc = subprocess.Popen([sys.executable, str(Path(__file__).parent / "lfs_basic_server.py"), str(data), *options], stdout=subprocess.PIPE)
    try:
        url = proc.stdout.readline().decode().strip()
        yield url, RequestLog(data / "requests.jsonl"), proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def tool_remote(tool: str, root: Path, genv, agent_rss: Path | None, server_workers: int | None = None) -> Iterator[tuple[RequestLog, int, tuple[str, str] | None]]:
    """Configure `genv` (global git config of a temp HOME) to push LFS objects with `tool`;
    with `agent_rss`, each agent's peak RSS is appended to that file. Yields the server's
    request log, its process id and, for git-xet, its URL and a read token (for the ranged
    basic baseline)."""
    if tool == "git-xet":
        with running_server(root / "server" / "data", "--workers", str(server_workers or DEFAULT_WORKERS)) as srv:
            genv.git_xet("install", "--standalone", srv.url)
            genv.git("config", "--global", "xet.token", srv.token("write"))
            if agent_rss is not None:
                record_agent_rss(genv, agent_rss)
            yield RequestLog(srv.data_dir.parent / "server.log"), srv.process.pid, (srv.url, srv.token("read"))
    else:
        with plain_lfs_server(root / "lfs-server", BASIC_SERVERS[tool]) as (url, log, pid):
            genv.git("lfs", "install")
            genv.git("config", "--global", "lfs.url", f"{url}/bench.git/info/lfs")
            yield log, pid, None


def run_tool(tool: str, root: Path, sources: list[Path], *, clones: int = 1, agent_rss: bool = False, server_workers: int | None = None) -> dict[str, list[dict]]:
    """push, `clones` clones (none with 0) and push_v2 for one tool: {phase: [measurements]},
    one entry per time the phase ran.

    With agent_rss (git-xet only), agents run under a wrapper that records their peak RSS;
    the wrapper's own start-up then adds to the timings, so timing runs leave it off.
    """
    genv = make_git_env(root)
    env = genv.env
    rss_file = root / "agent-rss.txt" if agent_rss and tool == "git-xet" else None
    with tool_remote(tool, root, genv, rss_file, server_workers) as (log, server_pid, xet_server):
        work = lfs_repo_with(genv, root, sources)
        result: dict[str, list[dict]] = {}

        def phase(name: str, cmd: list[str], cwd: Path) -> None:
            log.mark()
            if rss_file is not None:
                rss_file.write_text("")
            client0, server0 = children_cpu(), process_cpu(server_pid)
            run = timed(cmd, cwd=cwd, env=env, stderr_to=root / f"{name}.stderr")
            client_cpu, server_cpu = children_cpu() - client0, process_cpu(server_pid) - server0
            bytes_in, bytes_out = log.since_mark()
            peaks = agent_peak_rss(rss_file) if rss_file is not None else []
            result.setdefault(name, []).append({
                "seconds": run["seconds"], "client_cpu": client_cpu, "server_cpu": server_cpu,
                "bytes_in": bytes_in, "bytes_out": bytes_out, "agent_peak_rss_mib": max(peaks, default=float("nan")),
            })  # fmt: skip

        phase("push", ["git", "push", "-q", "origin", "main"], work)
        clone = root / "clone"
        for _ in range(clones):
            shutil.rmtree(clone, ignore_errors=True)
            phase("clone", ["git", "clone", "-q", str(root / "remote.git"), str(clone)], root)
            for src in sources:
                if subprocess.run(["cmp", "-s", str(src), str(clone / src.name)], check=False).returncode:
                    raise RuntimeError(f"{tool}: the clone's {src.name} differs from what was pushed")
        if xet_server is not None:  # the same clones with upstream's design as git-lfs's agent: ranged GETs of the basic URL
            url, token = xet_server
            token_file = root / "read-token"
            token_file.write_text(token)
            for _ in range(clones):
                shutil.rmtree(clone, ignore_errors=True)
                phase(RANGED_CLONE, ranged_basic_agent.clone_command(url, token_file, root / "remote.git", clone), root)
                for src in sources:
                    if subprocess.run(["cmp", "-s", str(src), str(clone / src.name)], check=False).returncode:
                        raise RuntimeError(f"ranged basic: the clone's {src.name} differs from what was pushed")
        edit_file(work / sources[0].name, seed=7)
        genv.git("commit", "-qam", "v2", cwd=work)
        phase("push_v2", ["git", "push", "-q", "origin", "main"], work)
    return result


def turn_order(tools: tuple[str, ...], repeat: int) -> tuple[str, ...]:
    """The tools in the order they run in repeat `repeat`: each repeat starts one later, so over
    len(tools) repeats each tool runs once in each position. A tool always run in the same
    place (with three tools in alternating order, the middle one) would carry whatever that
    place does to it: the memory the tool before it just freed, say."""
    shift = repeat % len(tools)
    return tools[shift:] + tools[:shift]


def run(files: int, file_mib: int, repeats: int, tools: tuple[str, ...], agent_rss: bool, server_workers: int | None = None, clones: int = 1) -> dict:
    compile_bytecode()
    results: dict[str, list[dict[str, list[dict]]]] = {t: [] for t in tools}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-git-") as tmp:
        base = Path(tmp)
        sources = model_files(base, files, file_mib)
        for r in range(repeats):
            for tool in turn_order(tools, r):
                root = base / f"{tool}-{r}"
                results[tool].append(run_tool(tool, root, sources, clones=clones, agent_rss=agent_rss, server_workers=server_workers))
                shutil.rmtree(root, ignore_errors=True)
    summary: dict = {
        "files": files, "file_mib": file_mib, "repeats": repeats, "clones": clones, "agent_rss": agent_rss,
        "server_workers": server_workers or DEFAULT_WORKERS, "machine": machine(), "tools": {},
    }  # fmt: skip
    summary["tools"] = {tool: phase_medians(runs) for tool, runs in results.items()}
    return summary


def phase_medians(runs: list[dict[str, list[dict]]]) -> dict[str, dict]:
    """Per phase, the median of each measurement over every time the phase ran, in every run
    (each of a repeat's clones counts once), with every run's seconds, lowest first."""
    medians: dict[str, dict] = {}
    for phase in ("push", "clone", "push_v2", RANGED_CLONE):
        samples = [sample for run in runs for sample in run.get(phase, [])]
        if phase == RANGED_CLONE and not samples:  # git-xet's server only, and only with clones
            continue
        medians[phase] = {key: median([sample[key] for sample in samples]) for key in PHASE_KEYS}
        medians[phase]["all_seconds"] = sorted(sample["seconds"] for sample in samples)
    return medians


def print_table(summary: dict) -> None:
    total = summary["files"] * summary["file_mib"]
    clones = summary["repeats"] * summary["clones"]
    print(f"git push/clone of {summary['files']} x {summary['file_mib']} MiB, median of {summary['repeats']} (clone: of {clones}); {summary['machine']}")
    print(f"{'phase':<9}{'tool':<16}{'seconds':>9}{'MiB/s':>8}{'client CPU':>11}{'server CPU':>11}{'MiB moved':>10}{'agent RSS':>10}")
    tools = summary["tools"]
    for phase in ("push", "clone", "push_v2"):
        for tool, phases in tools.items():
            m = phases[phase]
            moved = m["bytes_in"] if phase != "clone" else m["bytes_out"]
            rate = total / m["seconds"] if phase != "push_v2" else float("nan")
            rss = f"{m['agent_peak_rss_mib']:.0f} MiB" if summary["agent_rss"] and tool == "git-xet" else "-"
            print(f"{phase:<9}{tool:<16}{m['seconds']:>9.2f}{rate:>8.0f}{m['client_cpu']:>11.2f}{m['server_cpu']:>11.2f}{moved / MIB:>10.1f}{rss:>10}")
        for peer in (t for t in tools if t != "git-xet" and "git-xet" in tools):
            ours, theirs = tools["git-xet"][phase], tools[peer][phase]
            print(f"{'':<9}{'ratio':<16}{ours['seconds'] / theirs['seconds']:>9.2f}   (git-xet / {peer} time)")
    if RANGED_CLONE in tools.get("git-xet", {}):
        ours, theirs = tools["git-xet"]["clone"], tools["git-xet"][RANGED_CLONE]
        print(f"{'clone':<9}{'ranged basic':<16}{theirs['seconds']:>9.2f}{total / theirs['seconds']:>8.0f}{theirs['client_cpu']:>11.2f}{theirs['server_cpu']:>11.2f}{theirs['bytes_out'] / MIB:>10.1f}{'-':>10}")
        print(f"{'':<9}{'ratio':<16}{ours['seconds'] / theirs['seconds']:>9.2f}   (git-xet / upstream's 8 ranged basic GETs, same server)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--file-mib", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clones", type=int, default=1, help="clones per repeat and tool, each into a fresh directory (default %(default)s)")
    parser.add_argument("--tools", default=",".join(TOOLS))
    parser.add_argument("--agent-rss", action="store_true", help="record each agent's peak RSS (adds a wrapper process per agent)")
    parser.add_argument("--server-workers", type=int, default=DEFAULT_WORKERS, help="git xet serve --workers (default: its default, %(default)s here)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    tools = tuple(t for t in args.tools.split(",") if t)
    known = ("git-xet", *BASIC_SERVERS)
    if unknown := set(tools) - set(known):
        parser.error(f"unknown tools: {', '.join(sorted(unknown))} (known: {', '.join(known)})")
    if args.clones < 0:
        parser.error("--clones must be 0 or more")
    summary = run(args.files, args.file_mib, args.repeats, tools, args.agent_rss, args.server_workers, args.clones)
    print_table(summary)
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
