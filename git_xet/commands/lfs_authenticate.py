"""`git xet lfs-authenticate`: the sshd forced command that serves SSH remotes of a `git xet serve`.

One authorized_keys line per user, each naming the user and what they may reach:

    command="git xet lfs-authenticate --data /srv/xet --url https://xet.example.org --user alice --repo 'alice/*'" ssh-ed25519 AAAA...

sshd runs it for every connection of that key, with what the client asked in
$SSH_ORIGINAL_COMMAND:
- `git-lfs-authenticate REPO upload|download` (git-lfs's hybrid SSH, and our agent renewing CAS
  tokens): JSON `{"href", "header", "expires_in"}`, the repo's LFS endpoint on the server and a
  short-lived user token for that repo only (read for downloads, write for uploads);
- `git-upload-pack` / `git-receive-pack` 'REPO.git' (with --git-root): git itself, on the bare
  repository under that root, when the user may read (or write) that repo;
- `git-lfs-transfer` (git-lfs's pure SSH protocol) is refused: it offers no custom transfer, so
  the XET agent would never run; git-lfs then falls back to git-lfs-authenticate.
The user is whoever holds the key: the name comes from the key's line, not from the client.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time
from fnmatch import fnmatchcase
from pathlib import Path
from typing import NamedTuple

from ..core.errors import XetError

# A repo id as the server's routes take it: ns/name, datasets/ns/name, spaces/ns/name.
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,95}")
_GIT_COMMANDS = {"git-upload-pack": "read", "git-upload-archive": "read", "git-receive-pack": "write"}


class Refused(XetError):
    """Why the request is not served; the message goes to the client's stderr."""


class Grant(NamedTuple):
    """What the key's line allows."""

    user: str
    patterns: list[str]
    scope: str  # the most the user gets: read or write

    def allows(self, repo: str, needed: str) -> bool:
        if needed == "write" and self.scope != "write":
            return False
        return any(_matches(pattern, repo) for pattern in self.patterns)


def _matches(pattern: str, repo: str) -> bool:
    """Segment by segment, so `alice/*` is alice's repos and not `alice/x/y`."""
    want, have = pattern.strip("/").split("/"), repo.split("/")
    return len(want) == len(have) and all(fnmatchcase(h, w) for w, h in zip(want, have, strict=True))


def repo_of(path: str) -> str:
    """The repo id of the path a client asked for (`/acme/model.git`, `acme/model`, ...)."""
    repo = path.strip().strip("/").removesuffix("/").removesuffix(".git")
    segments = repo.split("/")
    kind_prefix = segments[0] in ("datasets", "spaces")
    if len(segments) != (3 if kind_prefix else 2) or not all(_SEGMENT.fullmatch(s) and not s.endswith(".") for s in segments):
        raise Refused(f"'{path}' is not a repository path like ns/name.git, datasets/ns/name.git or spaces/ns/name.git")
    return repo


class Answer(NamedTuple):
    """What to print, or which git to run instead."""

    stdout: str
    exec_argv: list[str] | None
    log: str


def answer(command: str, grant: Grant, signer_mint, url: str, ttl: int, git_root: Path | None) -> Answer:
    """The reply to one $SSH_ORIGINAL_COMMAND (pure: minting is `signer_mint(scope, ttl, repo)`)."""
    try:
        words = shlex.split(command)
    except ValueError:
        raise Refused("unreadable command") from None
    if not words:
        raise Refused("this key only serves git and git-lfs; there is no shell here")
    verb = words[0]
    if verb == "git-lfs-authenticate":
        if len(words) != 3 or words[2] not in ("upload", "download"):
            raise Refused("usage: git-lfs-authenticate REPO upload|download")
        repo, operation = repo_of(words[1]), words[2]
        needed = "write" if operation == "upload" else "read"
        if not grant.allows(repo, needed):
            raise Refused(f"user {grant.user} may not {operation} LFS objects of {repo}")
        token, claims = signer_mint(needed, ttl, repo)
        body = {"href": f"{url.rstrip('/')}/{repo}.git/info/lfs", "header": {"Authorization": f"Bearer {token}"}, "expires_in": ttl}
        return Answer(json.dumps(body), None, f"user={grant.user} repo={repo} operation={operation} token={claims.id} exp={claims.exp}")
    if verb == "git-lfs-transfer":
        raise Refused(
            "git-lfs-transfer (the pure SSH protocol) is not offered: it negotiates no custom transfer, so XET would not be used; "
            "git-lfs falls back to git-lfs-authenticate (set `git config lfs.sshtransfer never` to skip this attempt)"
        )
    if verb in _GIT_COMMANDS:
        if git_root is None:
            raise Refused("this server serves only Git LFS over SSH; push and fetch git itself elsewhere")
        if len(words) != 2:
            raise Refused(f"usage: {verb} 'REPO.git'")
        repo = repo_of(words[1])
        if not grant.allows(repo, _GIT_COMMANDS[verb]):
            raise Refused(f"user {grant.user} may not {'push to' if _GIT_COMMANDS[verb] == 'write' else 'read'} {repo}")
        where = git_root / f"{repo}.git"
        if not where.is_dir():
            raise Refused(f"no repository {repo} here")
        return Answer("", ["git", verb.removeprefix("git-"), str(where)], f"user={grant.user} repo={repo} git={verb}")
    raise Refused(f"'{verb}' is not served here: this key only serves git and git-lfs")


def run(data: Path | None, secret_file: Path | None, url: str, grant: Grant, ttl: int, git_root: Path | None, log_file: Path | None) -> int:
    """Serve $SSH_ORIGINAL_COMMAND; the exit code is sshd's."""
    from ..server.auth import Signer, load_secret
    from ..server.errors import SecretError

    command = os.environ.get("SSH_ORIGINAL_COMMAND")
    if command is None:
        print("git-xet lfs-authenticate: run by sshd as a key's forced command (no $SSH_ORIGINAL_COMMAND)", file=sys.stderr)
        return 2
    try:
        signer = Signer(load_secret(data, secret_file))
        reply = answer(command, grant, signer.mint_user, url, ttl, git_root)
    except (Refused, SecretError) as exc:
        _log(log_file, f"user={grant.user} refused: {exc}")
        print(f"git-xet: {exc}", file=sys.stderr)
        return 1
    _log(log_file, reply.log)
    if reply.exec_argv is not None:
        os.execvp(reply.exec_argv[0], reply.exec_argv)
    print(reply.stdout)
    return 0


def _log(log_file: Path | None, line: str) -> None:
    """One line per request (never a token: its id, to revoke it with `git xet token --revoke ID`)."""
    if log_file is None:
        return
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(log_file, "a", encoding="utf-8") as out:
        out.write(f"{stamp} {line}\n")
