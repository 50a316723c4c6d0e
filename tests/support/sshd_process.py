"""A private OpenSSH sshd on 127.0.0.1 for a test: a generated host key, the test's
authorized_keys (forced commands), stopped by PID with a bounded wait."""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tests.support.processes import stop_process


def sshd_binary() -> str:
    found = shutil.which("sshd") or ("/usr/sbin/sshd" if os.access("/usr/sbin/sshd", os.X_OK) else None)
    assert found, "sshd is missing: install/test.sh installs it (install/services.sh: apt-get install openssh-server)"
    return found


@dataclass(frozen=True)
class RunningSshd:
    port: int
    user: str
    key: Path  # the client's private key
    log: Path

    def git_ssh_command(self) -> str:
        """What a client sets as GIT_SSH_COMMAND (git and git-lfs add `-p PORT` from the URL)."""
        return f"ssh -i {self.key} -o IdentitiesOnly=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes"

    def url(self, path: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}/{path}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keygen(path: Path) -> str:
    """A new passphrase-less ed25519 key at `path`; its public line."""
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True, timeout=30, capture_output=True)
    return Path(f"{path}.pub").read_text().strip()


@contextmanager
def running_sshd(root: Path, authorized: Path, key: Path, path_env: str) -> Iterator[RunningSshd]:
    """sshd -D on a free loopback port, for the keys in `authorized` (`key`: the client's), its
    sessions with PATH=`path_env` (where the forced commands are)."""
    root.mkdir(parents=True, exist_ok=True)
    keygen(root / "host_key")
    port = _free_port()
    config = root / "sshd_config"
    config.write_text(
        f"ListenAddress 127.0.0.1\nHostKey {root / 'host_key'}\nAuthorizedKeysFile {authorized}\nPidFile {root / 'sshd.pid'}\n"
        "StrictModes no\nUsePAM no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"PermitRootLogin prohibit-password\nLogLevel VERBOSE\nSetEnv PATH={path_env}\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # Debian's privilege-separation directory
    log = root / "sshd.log"
    with open(log, "ab") as err:  # the child keeps its own copy of the fd
        proc = subprocess.Popen([sshd_binary(), "-D", "-e", "-f", str(config), "-p", str(port)], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 20
        while True:
            assert proc.poll() is None, f"sshd exited: {log.read_text(errors='replace')[-2000:]}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "sshd did not listen within 20 s"
                time.sleep(0.05)
        yield RunningSshd(port, getpass.getuser(), key, log)
    finally:
        stop_process(proc)
