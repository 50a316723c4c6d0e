"""HTTP credentials for an SSH remote: `ssh [-p PORT] [USER@]HOST git-lfs-authenticate PATH OP`.

This is git-lfs's "hybrid SSH": the server's forced command answers JSON
`{"href", "header", "expires_in" | "expires_at"}`, the LFS endpoint and the headers to call it
with. git-lfs does it for its batch calls; the agent does it again when a CAS token must be
renewed mid-push, since the batch's credentials never reach a custom transfer agent. The ssh
command is built as git-lfs builds it (lfshttp/ssh.go, ssh/ssh.go): $GIT_SSH_COMMAND, else
$GIT_SSH, else core.sshCommand, else `ssh`; `-p PORT` (`-P` for PuTTY's plink), `-batch` for
TortoisePlink, `--` before a host that starts with `-`; a command string runs through `sh -c`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple
from urllib.parse import urlsplit

from .errors import TransferError

# How long one `ssh ... git-lfs-authenticate` may take: a key agent, a slow link and a
# server that mints a token answer in seconds; a hung connection must not hang the push.
SSH_TIMEOUT = 60.0
# A cached answer is renewed this long before it expires (git-lfs: 5 s).
EXPIRY_MARGIN = 5.0


class SshRemote(NamedTuple):
    """Where git-lfs-authenticate runs: git-lfs's SSHMetadata."""

    user_and_host: str
    port: str
    path: str


def parse_ssh_remote(url: str) -> SshRemote | None:
    """The SSH remote a git URL names (`ssh://[user@]host[:port]/path`, `git+ssh://`, `ssh+git://`,
    or scp-like `[user@]host:path`), or None for any other URL (https, file, a local path).
    The path is passed as git-lfs passes it: with its leading `/` for ssh:// URLs, without for scp-like."""
    scheme, sep, _ = url.partition("://")
    if sep:
        if scheme.lower() not in ("ssh", "git+ssh", "ssh+git"):
            return None
        parts = urlsplit("ssh://" + url.split("://", 1)[1])
        host = parts.hostname or ""
        if not host:
            return None
        try:
            port = str(parts.port) if parts.port is not None else ""
        except ValueError:
            return None
        user = parts.username
        return SshRemote(f"{user}@{host}" if user else host, port, parts.path)
    head, colon, path = url.partition(":")
    if not colon or "/" in head or not head or os.path.exists(url):
        return None  # a local path (git's rule: no colon before the first slash)
    if head.startswith("[") and "]" in url:  # [user@host:port]:path
        inner, _, rest = url[1:].partition("]")
        user_host, _, port = inner.rpartition(":")
        return SshRemote(user_host or inner, port if user_host else "", rest.lstrip(":").lstrip("/"))
    return SshRemote(head, "", path.lstrip("/"))


def ssh_command(remote: SshRemote, remote_command: str, environ: Mapping[str, str], git_config: Callable[[str], str | None]) -> list[str]:
    """The argv git-lfs would run for `remote_command` on `remote`."""
    program, command_line = environ.get("GIT_SSH") or "", ""
    for text in (environ.get("GIT_SSH_COMMAND"), None if program else git_config("core.sshcommand")):
        fields = shlex.split(text) if text else []
        if fields:
            program, command_line = fields[0], text or ""
            break
    program = program or "ssh"
    variant = _variant(program, environ.get("GIT_SSH_VARIANT") or git_config("ssh.variant"))
    args = ["-batch"] if variant == "tortoiseplink" else []
    if remote.port:
        args += ["-P" if variant in ("putty", "tortoiseplink") else "-p", remote.port]
    if remote.user_and_host.startswith("-"):
        args += ["--", remote.user_and_host] if variant == "ssh" else [remote.user_and_host.lstrip("-")]
    else:
        args.append(remote.user_and_host)
    args.append(remote_command)
    if command_line:
        return ["sh", "-c", command_line + " " + " ".join(shlex.quote(a) for a in args)]
    return [program, *args]


def _variant(program: str, configured: str | None) -> str:
    if configured in ("ssh", "simple", "putty", "tortoiseplink"):
        return configured
    if configured == "plink":
        return "putty"
    if configured not in (None, "", "auto"):
        return "ssh"
    base = os.path.splitext(os.path.basename(program))[0].lower()
    return {"plink": "putty", "tortoiseplink": "tortoiseplink"}.get(base, "ssh")


class SshAuth(NamedTuple):
    """One git-lfs-authenticate answer."""

    href: str
    header: dict[str, str]
    expires_at: float  # 0: no expiry given (then lfs.defaulttokenttl, as git-lfs)


def authenticate(argv: list[str], timeout: float = SSH_TIMEOUT, default_ttl: float = 0.0) -> SshAuth:
    """Run the ssh command and read its answer; TransferError says what failed (never the token)."""
    started = time.time()
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TransferError(f"`{_shown(argv)}` did not answer within {timeout:g} s; check that you can `ssh` to the remote's host", retryable=True) from None
    except OSError as exc:
        raise TransferError(f"cannot run ssh for git-lfs-authenticate ({exc}); install OpenSSH or set GIT_SSH_COMMAND") from None
    if proc.returncode != 0:
        said = proc.stderr.decode("utf-8", "replace").strip()[-500:]
        raise TransferError(f"`{_shown(argv)}` failed with exit code {proc.returncode}: {said or 'no message'}", retryable=proc.returncode == 255)
    try:
        answer = json.loads(proc.stdout)
        href, header = str(answer["href"]), {str(k): str(v) for k, v in (answer.get("header") or {}).items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise TransferError("git-lfs-authenticate answered something that is not its JSON ({href, header, expires_in})") from None
    expires_at = _expiry(answer, started) or (started + default_ttl if default_ttl > 0 else 0.0)
    return SshAuth(href, header, expires_at)


def _expiry(answer: dict, started: float) -> float:
    """When the answer expires: `expires_in` seconds after the command started, or `expires_at` (RFC 3339)."""
    expires_in = answer.get("expires_in")
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
        return started + float(expires_in)
    expires_at = answer.get("expires_at")
    if isinstance(expires_at, str) and expires_at and not expires_at.startswith("0001-"):
        from datetime import datetime

        try:
            return datetime.fromisoformat(expires_at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return 0.0
    return 0.0


def _shown(argv: list[str]) -> str:
    """The command for an error message: the ssh invocation, which holds no secret."""
    return " ".join(argv[2:] if argv[:2] == ["sh", "-c"] else argv)[:300]


class SshCredentials:
    """Credential headers for the token refresh route, from git-lfs-authenticate, cached until
    they expire; renewed under a lock, so one agent runs one ssh at a time. `check` sees each
    answer's href before its headers are used (the router: the refresh route must have the LFS
    endpoint's origin, so the headers go nowhere else)."""

    def __init__(self, run: Callable[[], SshAuth], check: Callable[[str], None]) -> None:
        self._run = run
        self._check = check
        self._lock = threading.Lock()
        self._auth: SshAuth | None = None
        self.runs = 0

    def __repr__(self) -> str:
        return "SshCredentials(<hidden>)"

    def __call__(self) -> dict[str, str]:
        with self._lock:
            auth = self._auth
            if auth is None or auth.expires_at == 0 or time.time() > auth.expires_at - EXPIRY_MARGIN:
                auth = self._run()
                self._check(auth.href)
                self._auth = auth
                self.runs += 1
            return dict(auth.header)
