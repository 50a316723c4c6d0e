"""SSH remotes: git and Git LFS over a real sshd whose forced command is `git xet lfs-authenticate`.

The remote is `ssh://USER@127.0.0.1:PORT/acme/model.git`: git's packs go through the forced
command to git-receive-pack, git-lfs gets its LFS endpoint and token from git-lfs-authenticate
(hybrid SSH), and the agent renews CAS tokens through the same git-lfs-authenticate when the push
outlives them (CAS tokens of 8 s, user tokens of 10 s, each object held back 4 s on its way to
the agent).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from tests.support.datagen import random_bytes
from tests.support.docs_blocks import run_block
from tests.support.gitenv import GitEnv, make_git_env
from tests.support.server_process import RunningServer, running_server
from tests.support.sshd_process import RunningSshd, keygen, running_sshd

# Forwards git-lfs's lines to the agent, holding each upload back DELAY seconds: a push that
# takes longer than several CAS tokens live, without a slow network.
_SLOW_AGENT = r"""
import subprocess, sys, time
agent = subprocess.Popen(sys.argv[2:], stdin=subprocess.PIPE)
for line in sys.stdin.buffer:
    if b'"event":"upload"' in line.replace(b" ", b""):
        time.sleep(float(sys.argv[1]))
    agent.stdin.write(line)
    agent.stdin.flush()
agent.stdin.close()
sys.exit(agent.wait(timeout=60))
"""


def _ssh_setup(tmp: Path, srv: RunningServer, ttl: int = 10) -> tuple[GitEnv, Path, Path]:
    """A user machine (git, git-lfs, our agent) and the SSH host's authorized_keys, written by
    the docs' block; the bare repository acme/model.git under the git root."""
    g = make_git_env(tmp / "alice")
    git_root = tmp / "git"
    g.git("init", "-q", "--bare", str(git_root / "acme" / "model.git"))
    (tmp / "alice.pub").write_text(keygen(tmp / "alice.key") + "\n")  # the public key, as the docs name it
    host_home = tmp / "sshhome"
    (host_home / ".ssh").mkdir(parents=True)
    run_block(
        "server.md", "ssh-forced-command",
        {"/srv/xet": str(srv.data_dir), "https://xet.example.com": srv.url, "/srv/git": str(git_root)},
        cwd=tmp, env=dict(g.env, HOME=str(host_home)),
    )  # fmt: skip
    authorized = host_home / ".ssh" / "authorized_keys"
    authorized.write_text(authorized.read_text().replace("lfs-authenticate ", f"lfs-authenticate --ttl {ttl} "))
    return g, authorized, tmp / "alice.key"


def _use(g: GitEnv, sshd: RunningSshd) -> None:
    g.env["GIT_SSH_COMMAND"] = sshd.git_ssh_command()
    g.git("lfs", "install", "--skip-repo")
    g.git_xet("install")


def test_a_push_over_ssh_outlives_several_cas_tokens(tmp_path: Path) -> None:
    with running_server(tmp_path / "srv" / "data", "--cas-token-ttl", "8") as srv:
        g, authorized, key = _ssh_setup(tmp_path, srv)
        path_env = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"
        with running_sshd(tmp_path / "sshd", authorized, key, path_env) as sshd:
            _use(g, sshd)
            wrapper = g.root / "slow_agent.py"
            wrapper.write_text(_SLOW_AGENT)
            g.git("config", "--global", "lfs.customtransfer.xet.path", sys.executable)
            g.git("config", "--global", "lfs.customtransfer.xet.args", f"{wrapper} 4 {Path(sys.executable).with_name('git-xet')} transfer")
            g.git("config", "--global", "lfs.concurrenttransfers", "1")
            files = {f"m{i}.bin": random_bytes(300_000 + i, 500 + i) for i in range(6)}
            work = g.lfs_work_tree(files, remote=sshd.url("acme/model.git"), new_remote=False)
            run_block("troubleshooting.md", "ssh-hybrid", {}, cwd=work, env=g.env)

            pushed = g.run("git", "push", "-q", "origin", "main", cwd=work, timeout=240)

            assert "the CAS token will not be refreshed" not in g.agent_log()
            renewals = srv.log().count("xet-write-token/main")
            assert renewals >= 3, f"{renewals} CAS token renewals in the server's log:\n{srv.log()[-3000:]}\n{pushed.stderr}"
            auth_log = (srv.data_dir / "ssh.log").read_text()
            assert auth_log.count("user=alice repo=acme/model operation=upload") >= 3  # git-lfs's, then the agent's renewals
            assert "git=git-receive-pack" in auth_log

            # Everything arrived: a fresh clone over the same remote checks each file out.
            g.git("config", "--global", "--unset", "lfs.customtransfer.xet.args")
            g.git_xet("install")
            g.git("clone", "-q", sshd.url("acme/model.git"), "copy")
            for name, data in files.items():
                assert (g.root / "copy" / name).read_bytes() == data
            assert "operation=download" in (srv.data_dir / "ssh.log").read_text()
