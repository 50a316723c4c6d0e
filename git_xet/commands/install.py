"""`git xet install` / `uninstall`: register (or remove) the agent in git config.

Registration: `lfs.customtransfer.xet.{path,args,concurrent,direction}` (the keys git-lfs 3.x
reads, in the one case git-lfs 3.7 reads: see lfs_keys.py; `.lfsconfig` cannot set them).
Standalone mode additionally names the store (`xet.endpoint`)
and turns on `lfs.standalonetransferagent=xet`, for every remote or, with --remote, for one
remote only through a synthetic https LFS URL (a custom scheme would be parsed as SSH).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import XetError
from ..platform.gitcmd import GitResult, run_git
from .lfs_keys import AGENT, registration

SCOPED_URL = "https://{remote}.git-xet.invalid/lfs"
CONCURRENCY_MARK = "xet.installedconcurrenttransfers"  # install set lfs.concurrenttransfers


class GitError(XetError):
    pass


@dataclass(frozen=True)
class Scope:
    flag: str  # --global, --local or --system


def _git(*args: str, check: bool = True) -> GitResult:
    proc = run_git(*args)
    if check and not proc.ok:
        raise GitError(f"git {' '.join(args)} failed: {proc.stderr.strip() or proc.returncode}")
    return proc


def _set(scope: Scope, key: str, value: str) -> None:
    _git("config", scope.flag, "--replace-all", key, value)


def _unset(scope: Scope, key: str) -> None:
    _git("config", scope.flag, "--unset-all", key, check=False)  # absent is fine


def agent_command() -> tuple[str, str]:
    """(path, args) that run this installation's agent, whatever PATH git-lfs sees.

    git-lfs runs `sh -c "'<path>' <args>"`. Where there is a POSIX shell, that is launch.sh
    (which answers `init` at once and starts Python only for an agent given a request) with
    the agent's command as its arguments, each quoted for that shell; elsewhere the command.
    """
    from ..agent.transfer import LAUNCHER

    path, args = _python_agent()
    if os.name == "posix" and os.path.isfile(LAUNCHER):
        return "sh", " ".join(shlex.quote(word) for word in (LAUNCHER, path, *shlex.split(args)))
    return path, args


def _python_agent() -> tuple[str, str]:
    """The Python agent's (path, args). The script beside the running interpreter is this
    installation's; another `git-xet` on PATH may belong to a different environment."""
    beside = Path(sys.executable).parent / "git-xet"
    if beside.is_file():
        return str(beside), "transfer"
    exe = shutil.which("git-xet")
    if exe:
        return str(Path(exe).resolve()), "transfer"
    return sys.executable, "-m git_xet transfer"


def install(scope: Scope, standalone: str | None, remote: str | None, concurrency: int | None, native: str | None = None, check_server: bool = True) -> list[str]:
    """Configure git; returns human-readable lines of what was done. Every argument is checked
    before git's configuration is touched, a server store's URL included (it must answer like
    `git xet serve`, unless `check_server` is False: a server set up later)."""
    from ..client.location import LocationError, create_local_store, parse_store_location

    where = None
    if standalone:
        try:
            where = parse_store_location(standalone, relative_to=Path.cwd())
        except LocationError as exc:
            raise GitError(f"--standalone {exc}") from None
    if native and not native.startswith(("https://", "http://")):
        raise GitError(f"--native needs the Hub's URL with its scheme, e.g. https://huggingface.co (got '{native}')")
    if concurrency is not None and concurrency < 1:
        raise GitError("--concurrency must be at least 1 (git-lfs's default is 8)")
    if where is not None and where.kind == "http" and check_server:
        from .doctor import server_health

        health = server_health(where.location)
        if not health.ok:
            raise GitError(f"{health.what.removeprefix('mode: standalone, ')}: {health.fix} (or, for a server you set up later, add --no-check)")
    done = []
    if where is not None and where.kind == "local":
        try:
            created = create_local_store(Path(where.location))
        except (LocationError, OSError) as exc:
            raise GitError(f"cannot use {where.location} as the store: {exc}") from None
        done.append(f"{'created a new' if created else 'using the existing'} XET store at {where.location}")
    if where is not None and where.kind == "s3":
        done.append(_create_bucket_store(where.location))
    if not _git("config", "--get", "filter.lfs.process", check=False).ok:
        lfs_args = ["lfs", "install"] + (["--skip-repo"] if scope.flag != "--local" else ["--local"])
        if scope.flag == "--system":
            lfs_args.append("--system")
        _git(*lfs_args)
        done.append("ran `git " + " ".join(lfs_args) + "`")
    path, args = agent_command()
    _set(scope, f"lfs.customtransfer.{AGENT}.path", path)
    _set(scope, f"lfs.customtransfer.{AGENT}.args", args)
    for key, value in registration().items():
        _set(scope, key, value)
    done.append(f"registered the transfer agent: {path} {args}")
    if concurrency is not None:
        _set(scope, "lfs.concurrenttransfers", str(concurrency))
        _set(scope, CONCURRENCY_MARK, "true")  # so uninstall removes only what install set
        done.append(f"lfs.concurrenttransfers = {concurrency}")
    if native:
        # git matches `lfs.<url>.*` keys against the LFS endpoint by URL prefix.
        _set(scope, f"lfs.{native.rstrip('/')}/.standalonetransferagent", AGENT)
        done.append(f"LFS endpoints under {native} use git-xet directly (native XET uploads and downloads)")
    if where is not None:
        _set(scope, "xet.endpoint", where.location)
        if remote:
            url = SCOPED_URL.format(remote=remote)
            _set(scope, f"remote.{remote}.lfsurl", url)
            _set(scope, f"lfs.{url}.standalonetransferagent", AGENT)
            done.append(f"remote '{remote}' stores LFS objects in {where.location} (standalone)")
        else:
            _set(scope, "lfs.standalonetransferagent", AGENT)
            done.append(f"every remote stores LFS objects in {where.location} (standalone)")
    return done


def _create_bucket_store(location: str) -> str:
    """Make the bucket prefix a store (credentials and endpoint from the AWS SDK's environment)."""
    from ..client.bucket_backend import create_bucket_store, open_bucket_objects
    from ..client.errors import TransferError
    from ..storage.s3 import S3Error

    try:
        created = create_bucket_store(open_bucket_objects(location))
    except (TransferError, S3Error) as exc:
        raise GitError(f"cannot use {location} as the store: {getattr(exc, 'message', exc)}") from None
    return f"{'created a new' if created else 'using the existing'} XET store at {location}"


def uninstall(scope: Scope) -> list[str]:
    """Remove every key install sets at this scope: the agent, standalone routing, the
    concurrency install set (not one the user set), and every `xet.*` key (endpoint, token)."""
    for key in (f"lfs.customtransfer.{AGENT}.path", f"lfs.customtransfer.{AGENT}.args", *registration()):
        _unset(scope, key)
    if _git("config", scope.flag, "--get", CONCURRENCY_MARK, check=False).stdout.strip() == "true":
        _unset(scope, "lfs.concurrenttransfers")
    if _git("config", scope.flag, "--get", "lfs.standalonetransferagent", check=False).stdout.strip() == AGENT:
        _unset(scope, "lfs.standalonetransferagent")
    listing = _git("config", scope.flag, "--name-only", "--get-regexp", r"^(lfs\..*\.standalonetransferagent|remote\..*\.lfsurl)$", check=False)
    for key in listing.stdout.split():
        value = _git("config", scope.flag, "--get", key, check=False).stdout.strip()
        if (key.endswith(".standalonetransferagent") and value == AGENT) or (key.endswith(".lfsurl") and ".git-xet.invalid/" in value):
            _unset(scope, key)
    xet_keys = _git("config", scope.flag, "--name-only", "--get-regexp", r"^xet\.", check=False).stdout.split()
    for key in sorted(set(xet_keys)):
        _unset(scope, key)
    removed = ", ".join(sorted(set(xet_keys))) or "none"
    return [f"removed git-xet's git configuration {scope.flag} (xet.* keys: {removed}); git-lfs itself is left installed"]
