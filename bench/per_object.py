"""CPU per small object: one agent (`git xet transfer`) fed `--objects` upload requests for LFS
objects of 4-64 KiB, one at a time as git-lfs sends them, into a fresh local store and into a
fresh `git xet serve`; reports the agent's and the server's CPU milliseconds per object.

    python bench/per_object.py [--objects 500] [--repeats 3] [--json OUT]

A diagnostic for bench/many_files.py, whose push is these costs a thousand times over plus
git's, git-lfs's and eight agents' start-ups. Here there is no git and no contention between
agents for the machine's cores, so a change to the per-object path shows through less noise
than in the wall time of a push. The agent's figure includes its start-up once (divided among
the objects). CPU comes from wait4 for the agent and /proc for the server, user and sys apart:
the kernel's share moves with the file system's state (creating files gets dearer after many
were deleted) more than with our code.

    python bench/per_object.py --instructions [--objects 125]

counts instructions instead (valgrind's callgrind; valgrind must be installed): one agent
storing one object into a fresh local store (its start-up, as each of git-lfs's eight agents
pays it), then one storing `--objects` (125: a 1000-file push's share per agent), and
`python -c pass` for scale. Unlike seconds, the counts repeat from run to run whatever else
the machine is doing, so two versions compare on one noisy machine.

    python bench/per_object.py --server-instructions [--objects 100]

counts the server's instead: a fresh `git xet serve` under callgrind, its counters zeroed once
it is up and dumped once one agent has stored `--objects` objects through it; per object. Near
the same from run to run (within ~1%: how often the event loop wakes depends on timing), and
user-space only: the kernel's share (fsyncs, SQLite's writes) is not in it. Valgrind runs
SHA-256 without the CPU's SHA extensions, so the server's sha256 of each object weighs ~1 M
instructions here (30 per byte) where the machine spends ~2 cycles per byte.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import machine, median, process_times, write_json
from many_files import compile_bytecode

from git_xet.client.location import create_local_store
from tests.support.agent_runs import put_lfs_object
from tests.support.server_process import running_server

KIB = 1024
STORES = ("local", "serve")
MEASURES = ("agent_user_ms", "agent_sys_ms", "server_user_ms", "server_sys_ms")


def lfs_objects(repo: Path, count: int, seed: int = 0) -> list[dict]:
    """`count` objects in git-lfs's layout under repo/.git/lfs, as upload requests."""
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    rng = random.Random(seed)
    requests = []
    for _ in range(count):
        data = rng.randbytes(rng.randint(4 * KIB, 64 * KIB))
        oid, path = put_lfs_object(repo, data)
        requests.append({"event": "upload", "oid": oid, "size": len(data), "path": str(path)})
    return requests


def _agent_stdin(requests: list[dict]) -> str:
    init = {"event": "init", "operation": "upload", "remote": "origin", "concurrent": True, "concurrenttransfers": 8}
    return "".join(json.dumps(m) + "\n" for m in (init, *requests, {"event": "terminate"}))


def _check_completed(answers: list[dict], requests: list[dict], returncode: int) -> None:
    completes = [m for m in answers if m.get("event") == "complete"]
    if returncode != 0 or len(completes) != len(requests) or any("error" in m for m in completes):
        raise RuntimeError(f"the agent failed (exit {returncode}): {[m for m in completes if 'error' in m][:3]}")


def agent_cpu(repo: Path, requests: list[dict], env: dict[str, str]) -> tuple[float, float]:
    """User and sys CPU seconds of one agent serving `requests`; raises unless every upload
    completed."""
    with tempfile.TemporaryFile("w+") as stdin, tempfile.TemporaryFile("w+") as stdout:
        stdin.write(_agent_stdin(requests))
        stdin.seek(0)
        agent = subprocess.Popen([sys.executable, "-m", "git_xet", "transfer"], stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, cwd=repo, env=env)
        _, status, usage = os.wait4(agent.pid, 0)
        agent.returncode = os.waitstatus_to_exitcode(status)
        stdout.seek(0)
        answers = [json.loads(line) for line in stdout if line.strip()]
    _check_completed(answers, requests, agent.returncode)
    return usage.ru_utime, usage.ru_stime


def instructions(cmd: list[str], *, stdin: str = "", cwd: Path | None = None, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Instructions `cmd` executed (callgrind's count, every thread) and its stdout."""
    proc = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd], input=stdin, capture_output=True, text=True, cwd=cwd, env=env, timeout=1800, check=False
    )
    counted = [line.rsplit(":", 1)[1].strip() for line in proc.stderr.splitlines() if "Collected :" in line]
    if proc.returncode != 0 or len(counted) != 1:
        raise RuntimeError(f"{cmd[0]} under callgrind failed (exit {proc.returncode}): {proc.stderr[-1000:]}")
    return int(counted[0]), proc.stdout


def agent_instructions(objects: int) -> dict:
    """Instructions of python -c pass, of an agent storing one object into a fresh local
    store, and of one storing `objects`; per extra object from the difference."""
    compile_bytecode()
    counts: dict[str, int] = {"python -c pass": instructions([sys.executable, "-c", "pass"])[0]}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-instructions-") as tmp:
        base = Path(tmp)
        requests = lfs_objects(base / "repo", objects)
        for count in (1, objects):
            root = base / f"store-{count}"
            root.mkdir()
            create_local_store(root / "store")
            env = dict(os.environ, GIT_XET_CACHE=str(root / "cache"), GIT_XET_ENDPOINT=str(root / "store"))
            n, out = instructions([sys.executable, "-m", "git_xet", "transfer"], stdin=_agent_stdin(requests[:count]), cwd=base / "repo", env=env)
            _check_completed([json.loads(line) for line in out.splitlines() if line.strip()], requests[:count], 0)
            counts[f"agent, {count} object{'s' if count > 1 else ''}"] = n
    per_object = (counts[f"agent, {objects} objects"] - counts["agent, 1 object"]) / (objects - 1)
    return {"objects": objects, "machine": machine(), "instructions": counts, "per_extra_object": per_object}


def server_instructions(objects: int) -> dict:
    """Instructions of a `git xet serve` (callgrind, every thread) while one agent stores
    `objects` objects through it, from its counters zeroed after start-up to a dump after."""
    compile_bytecode()
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-server-instructions-") as tmp:
        base = Path(tmp)
        requests = lfs_objects(base / "repo", objects)
        env = dict(os.environ, GIT_XET_CACHE=str(base / "cache"))
        dumps = base / "callgrind.out"
        with running_server(base / "data", wrapper=("valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}.%p")) as srv:
            env["GIT_XET_ENDPOINT"] = srv.url
            env["GIT_XET_TOKEN"] = srv.token("write")
            pid = str(srv.process.pid)
            subprocess.run(["callgrind_control", "--zero", pid], check=True, capture_output=True, timeout=120)
            agent_cpu(base / "repo", requests, env)
            subprocess.run(["callgrind_control", f"--dump={MEASURED}", pid], check=True, capture_output=True, timeout=120)
            counted = _dumped_instructions(base)
    return {"objects": objects, "machine": machine(), "instructions": counted, "per_object": counted / objects}


MEASURED = "measured"  # the name of callgrind's dump of the agent's objects


def _dumped_instructions(directory: Path) -> int:
    """The instructions in the callgrind dump named MEASURED under `directory`."""
    for dump in directory.glob("callgrind.out.*"):
        text = dump.read_text(errors="replace")
        if f"Trigger: dump {MEASURED}" in text:
            return max(int(line.split()[1]) for line in text.splitlines() if line.startswith(("summary:", "totals:")))
    raise RuntimeError(f"no callgrind dump {MEASURED!r} in {directory}: is valgrind's callgrind_control installed?")


@contextmanager
def store(kind: str, root: Path, env: dict[str, str]) -> Iterator[int | None]:
    """A fresh store of `kind` configured in `env`; yields the server's pid (None: no server)."""
    if kind == "local":
        create_local_store(root / "store")  # as `git xet install --standalone` does
        env["GIT_XET_ENDPOINT"] = str(root / "store")
        yield None
    else:
        with running_server(root / "data") as srv:
            env["GIT_XET_ENDPOINT"] = srv.url
            env["GIT_XET_TOKEN"] = srv.token("write")
            yield srv.process.pid


def measure(kind: str, root: Path, requests: list[dict], repo: Path) -> dict[str, float]:
    root.mkdir()
    env = dict(os.environ, GIT_XET_CACHE=str(root / "cache"))
    with store(kind, root, env) as server_pid:
        server0 = process_times(server_pid) if server_pid else (0.0, 0.0)
        user, sys_ = agent_cpu(repo, requests, env)
        server1 = process_times(server_pid) if server_pid else (0.0, 0.0)
    per_object = 1000 / len(requests)
    return {
        "agent_user_ms": user * per_object,
        "agent_sys_ms": sys_ * per_object,
        "server_user_ms": (server1[0] - server0[0]) * per_object,
        "server_sys_ms": (server1[1] - server0[1]) * per_object,
    }


def run(objects: int, repeats: int) -> dict:
    compile_bytecode()
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in STORES}
    with tempfile.TemporaryDirectory(prefix="git-xet-bench-objects-") as tmp:
        base = Path(tmp)
        requests = lfs_objects(base / "repo", objects)
        for r in range(repeats):
            for kind in STORES if r % 2 == 0 else reversed(STORES):
                runs[kind].append(measure(kind, base / f"{kind}-{r}", requests, base / "repo"))
    return {
        "objects": objects,
        "repeats": repeats,
        "machine": machine(),
        "stores": {kind: {key: median([m[key] for m in measured]) for key in MEASURES} for kind, measured in runs.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead of timing")
    parser.add_argument("--server-instructions", action="store_true", help="count the server's instructions per object under callgrind")
    args = parser.parse_args()
    if args.server_instructions:
        counted = server_instructions(args.objects if args.objects != parser.get_default("objects") else 100)
        print(f"server instructions (callgrind) per object stored through it: {counted['per_object'] / 1e6:.2f} M ({counted['objects']} objects); {counted['machine']}")
        write_json(args.json, counted)
        return
    if args.instructions:
        objects = args.objects if args.objects != parser.get_default("objects") else 125
        counted = agent_instructions(max(objects, 2))
        print(f"instructions (callgrind), into a fresh local store; {counted['machine']}")
        for what, n in counted["instructions"].items():
            print(f"{what:<28}{n / 1e6:>10.1f} M")
        print(f"{'per extra object':<28}{counted['per_extra_object'] / 1e6:>10.2f} M")
        write_json(args.json, counted)
        return
    summary = run(args.objects, args.repeats)
    print(f"{args.objects} LFS objects of 4-64 KiB through one agent, median of {args.repeats}; {summary['machine']}")
    print(f"{'store':<8}{'agent CPU ms/object, user + sys':>34}{'server CPU ms/object, user + sys':>36}")
    for kind, m in summary["stores"].items():
        agent = f"{m['agent_user_ms']:.2f} + {m['agent_sys_ms']:.2f}"
        server = f"{m['server_user_ms']:.2f} + {m['server_sys_ms']:.2f}" if kind == "serve" else "-"
        print(f"{kind:<8}{agent:>34}{server:>36}")
    write_json(args.json, summary)


if __name__ == "__main__":
    main()
