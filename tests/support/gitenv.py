"""A throwaway git + git-lfs environment: temp HOME, no system config, our agent on PATH."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from git_xet.client.shard_cache import ShardCache


def run_git_xet(*args: str, env: dict[str, str] | None = None, timeout: float = 300, check: bool = False) -> subprocess.CompletedProcess[str]:
    """`git xet ARGS...` as this interpreter runs it (the package under test), output captured."""
    return subprocess.run([sys.executable, "-m", "git_xet", *args], capture_output=True, text=True, timeout=timeout, env=env, check=check)


@dataclass
class GitEnv:
    root: Path
    env: dict[str, str]

    def run(self, *args: str, cwd: Path | None = None, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(args), cwd=cwd or self.root, env=self.env, capture_output=True, text=True, timeout=timeout, check=False)
        if check and proc.returncode != 0:
            log = self.agent_log()
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}\n--- agent log ---\n{log[-4000:]}")
        return proc

    def popen(self, *args: str, cwd: Path | None = None) -> subprocess.Popen:
        """Start a command in the background (output to a log under the root)."""
        with open(self.root / "popen.log", "ab") as log:  # the child keeps its own copy of the fd
            return subprocess.Popen(list(args), cwd=cwd or self.root, env=self.env, stdout=log, stderr=log)

    def git(self, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run("git", *args, cwd=cwd, check=check)

    def git_xet(self, *args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run(sys.executable, "-m", "git_xet", *args, cwd=cwd, check=check)

    def lfs_work_tree(self, files: dict[str, bytes], *, work: str = "work", remote: str | Path = "remote.git", new_remote: bool = True) -> Path:
        """A clone of `remote` (a new bare repository unless new_remote=False) at `work`, with
        `files` committed as LFS objects (*.bin tracked); nothing pushed yet."""
        if new_remote:
            self.git("init", "-q", "--bare", str(remote))
        self.git("clone", "-q", str(remote), work)
        tree = self.root / work
        self.git("lfs", "track", "*.bin", cwd=tree)
        for name, data in files.items():
            (tree / name).write_bytes(data)
        self.git("add", ".", cwd=tree)
        self.git("commit", "-qm", "v1", cwd=tree)
        return tree

    def use_credentials(self, password: str, username: str = "user", record: Path | None = None) -> None:
        """A global credential helper that answers git and git-lfs with these credentials; with
        `record`, each time it is asked appends a line there (to count the asks)."""
        asked = f"echo x >> {record}; " if record is not None else ""
        self.git("config", "--global", "credential.helper", f"!f() {{ {asked}echo username={username}; echo password={password}; }}; f")

    def agent_log(self) -> str:
        path = Path(self.env["GIT_XET_LOG"])
        return path.read_text(errors="replace") if path.exists() else ""


def make_git_env(tmp: Path) -> GitEnv:
    assert shutil.which("git-lfs"), "git-lfs is missing: install/test.sh installs it (apt-get install git-lfs)"
    home = tmp / "home"
    home.mkdir(parents=True)
    env = dict(os.environ)
    env.update(
        HOME=str(home),
        XDG_CONFIG_HOME=str(home / ".config"),
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_XET_CACHE=str(tmp / "xet-cache"),
        GIT_XET_LOG=str(tmp / "agent.log"),
        GIT_XET_QUIET="1",  # no notices on the terminal of whoever runs the tests (tests of them unset it)
        PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
    )
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_XET_ENDPOINT", "GIT_XET_TOKEN", "HF_TOKEN"):
        env.pop(key, None)
    genv = GitEnv(tmp, env)
    genv.git("config", "--global", "user.name", "git-xet tests")
    genv.git("config", "--global", "user.email", "tests@git-xet.invalid")
    genv.git("config", "--global", "init.defaultBranch", "main")
    return genv


# Runs the agent and appends its peak RSS (MiB) to a file when it exits: the peak of a git
# command's whole process tree would be git's own, which holds a smudged file in memory.
_AGENT_RSS = r"""
import resource, subprocess, sys
code = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "a") as out:
    out.write(f"{resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}\n")
sys.exit(code)
"""


def record_agent_rss(genv: GitEnv, rss_file: Path) -> None:
    """Run every agent of `genv` under a wrapper that appends its peak RSS to `rss_file`
    (call after `git xet install`; adds one short-lived Python process per agent)."""
    wrapper = genv.root / "agent_rss.py"
    wrapper.write_text(_AGENT_RSS)
    agent = Path(sys.executable).with_name("git-xet")
    genv.git("config", "--global", "lfs.customtransfer.xet.path", sys.executable)
    genv.git("config", "--global", "lfs.customtransfer.xet.args", f"{wrapper} {rss_file} {agent} transfer")


def agent_peak_rss(rss_file: Path) -> list[float]:
    return [float(x) for x in rss_file.read_text().split()] if rss_file.exists() else []


def agent_pids(g: GitEnv) -> list[int]:
    """Agents started for this test's environment (its GIT_XET_LOG path is unique)."""
    marker = f"GIT_XET_LOG={g.env['GIT_XET_LOG']}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"transfer" in cmdline and b"git-xet" in cmdline and marker in environ:
            pids.append(int(entry.name))
    return pids


def cached_xorbs(cache_root: Path) -> int:
    """Xorbs the shard cache under `cache_root` records as stored, over every store."""
    total = 0
    for directory in (cache_root / "shards").glob("*"):
        cache = ShardCache.at(directory)
        try:
            total += cache.usage()[0]
        finally:
            cache.close()
    return total


def completed_oids(trace: str) -> set[str]:
    """Oids an agent answered `complete` (without an error) for, from git-lfs's transfer trace
    (GIT_TRACE with GIT_TRANSFER_TRACE=1)."""
    done = set()
    for line in trace.splitlines():
        if "received response:" in line and '"complete"' in line:
            answer = json.loads(line[line.index("{") :])
            if "error" not in answer:
                done.add(answer["oid"])
    return done
