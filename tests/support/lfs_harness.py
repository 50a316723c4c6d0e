"""Stands in for git-lfs in front of transfer agents, to see how they share a fork server.

Run as a script: it names itself `git-lfs-harness` (so agents take it for their git-lfs process,
agent/lineage.py), starts each agent through `sh -c` as git-lfs does, sends `init` to each in
turn and waits for its answer, then each agent's requests, then `terminate`. Before terminating
it records which processes hold each agent's stdin (the agent, its `sh`, and a worker if one
serves it) and their parents. Like git-lfs, it sends `terminate` to every agent before waiting
for any (the agent that started a fork server waits for the server's other workers). Reads its plan as one JSON line on stdin. With "pause_at" set,
at each named point ("start": before the first agent, "terminate": before terminating) it prints
{"pause": point, "pid": its pid} and waits for a line ("go"). Prints a JSON report.

Plan: {"operation", "cwd", "agents": [{"env": {...}, "requests": [...]}...], "kill": index|null,
       "pause_at": [point...], "launcher": path of agent/launch.sh|null (start the agents through it,
       as `git xet install` registers them)}
Report: {"agents": [pid...], "answers": [[...]...], "holders": [[{"pid", "ppid"}...]...],
         "exit_codes": [...], "killed_worker_gone": bool|null}
Only the standard library: it runs in a fresh interpreter.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

_PR_SET_NAME = 15
_BOUND = 30.0  # seconds any one wait may take


def _parent(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            text = stat.read()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2 :].split()[1])


def _holders_of(pipe_inode: int) -> list[dict]:
    """Every process whose fd 0 is the pipe `pipe_inode`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            link = os.readlink(f"/proc/{entry}/fd/0")
        except OSError:
            continue
        if link == f"pipe:[{pipe_inode}]":
            found.append({"pid": int(entry), "ppid": _parent(int(entry))})
    return found


def _answer_to(proc: subprocess.Popen, oid: str | None) -> list[dict]:
    """Lines from `proc` up to the `complete` of `oid` (or one line when oid is None); every line
    must be protocol JSON, as git-lfs requires."""
    assert proc.stdout is not None
    lines = []
    deadline = time.monotonic() + _BOUND
    while time.monotonic() < deadline:
        raw = proc.stdout.readline()
        if not raw:
            raise RuntimeError(f"agent {proc.pid} closed its stdout")
        lines.append(json.loads(raw))
        if oid is None or (lines[-1].get("event") == "complete" and lines[-1].get("oid") == oid):
            return lines
    raise RuntimeError("no answer in time")


def _agent_pid(sh: int) -> int:
    """The agent under `sh -c` (sh itself if it exec'd the command)."""
    deadline = time.monotonic() + _BOUND
    while time.monotonic() < deadline:
        children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == sh]
        if children:
            return children[0]
        with open(f"/proc/{sh}/cmdline", "rb") as cmdline:
            if b"python" in cmdline.read():
                return sh
        time.sleep(0.01)
    raise RuntimeError("no agent under sh")


def _pause(point: str, plan: dict) -> None:
    if point in plan.get("pause_at", ()):
        print(json.dumps({"pause": point, "pid": os.getpid()}), flush=True)
        sys.stdin.readline()


def _compact(message: dict) -> str:
    """A message as git-lfs writes it: JSON without spaces (what launch.sh recognizes)."""
    return json.dumps(message, separators=(",", ":"))


def main() -> None:
    ctypes.CDLL(None).prctl(_PR_SET_NAME, b"git-lfs-harness", 0, 0, 0)
    plan = json.loads(sys.stdin.readline())
    _pause("start", plan)
    command = f"'{sys.executable}' -m git_xet transfer"
    if plan.get("launcher"):
        command = f"sh '{plan['launcher']}' {command}"
    init = {"event": "init", "operation": plan["operation"], "remote": "origin", "concurrent": True, "concurrenttransfers": len(plan["agents"])}
    procs = []
    for agent in plan["agents"]:  # one after another, each answering init first, as git-lfs does
        proc = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=plan["cwd"], env=agent["env"], text=True)
        assert proc.stdin is not None
        proc.stdin.write(_compact(init) + "\n")
        proc.stdin.flush()
        if _answer_to(proc, None) != [{}]:
            raise RuntimeError("init was not answered {}")
        procs.append(proc)
    agents = [_agent_pid(proc.pid) for proc in procs]
    answers: list[list[dict]] = [[] for _ in procs]
    for i, (proc, agent) in enumerate(zip(procs, plan["agents"])):
        assert proc.stdin is not None
        for request in agent["requests"]:
            proc.stdin.write(_compact(request) + "\n")
            proc.stdin.flush()
            answers[i] += _answer_to(proc, request["oid"])
    holders = [_holders_of(os.fstat(proc.stdin.fileno()).st_ino) for proc in procs if proc.stdin is not None]
    killed_worker_gone = None
    if plan.get("kill") is not None:
        victim = plan["kill"]
        others = {agents[victim], procs[victim].pid}
        workers = [h["pid"] for h in holders[victim] if h["pid"] not in others]
        os.kill(agents[victim], signal.SIGKILL)
        deadline = time.monotonic() + _BOUND
        while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
            time.sleep(0.02)
        killed_worker_gone = bool(workers) and not any(os.path.exists(f"/proc/{w}") for w in workers)
    _pause("terminate", plan)
    for proc in procs:  # all at once, as git-lfs's workers each end theirs
        assert proc.stdin is not None
        try:
            proc.stdin.write(_compact({"event": "terminate"}) + "\n")
            proc.stdin.close()
        except BrokenPipeError:
            pass
    exit_codes = []
    for proc in procs:
        assert proc.stdout is not None
        rest = proc.stdout.read()
        if rest.strip():
            raise RuntimeError(f"agent {proc.pid} wrote after terminate: {rest[:200]!r}")
        exit_codes.append(proc.wait(timeout=_BOUND))
    print(json.dumps({"agents": agents, "answers": answers, "holders": holders, "exit_codes": exit_codes, "killed_worker_gone": killed_worker_gone}))


if __name__ == "__main__":
    main()
