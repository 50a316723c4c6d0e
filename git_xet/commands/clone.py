"""`git xet clone URL [DIR]`: a fresh clone of a repository whose LFS objects live in an XET
store for one remote only.

Plain `git clone` cannot work for such a repository: the scoped configuration (`remote.origin.
lfsurl` and the agent) lives only in the clone that ran `git xet install --local`, so checkout
asks the git host's LFS server, which answers "object does not exist". This command clones
without checkout, configures the store for that remote in the new clone, then checks out.

The store comes from `--store`, or from `.xetconfig` committed in the repository
(`[xet] endpoint = ...`; `.lfsconfig` cannot carry it: git-lfs warns about keys it does not know).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from ..platform.gitcmd import run_git
from .install import GitError, Scope, install

SHARED_CONFIG = ".xetconfig"


# Clone and checkout of a big repository may take long; git shows its own progress meanwhile.
LONG_GIT_TIMEOUT = 3600.0


def _default_dir(url: str) -> str:
    """The directory `git clone` would pick for URL."""
    name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return name.removesuffix(".git") or "repo"


def _credential_line(location: str, target: Path) -> str:
    """Whether the clone's agents will send a token to the store, and where it was configured:
    a store the repository names gets one only if the user configured one for that store.
    Refused (before checkout) when the agents would refuse it too: plain http off this machine."""
    from ..agent.endpoints import ConfigError, read_config_snapshot, sendable_store_token

    try:
        found = sendable_store_token(location, read_config_snapshot(target))
    except ConfigError as exc:
        raise GitError(f"{exc}; the clone in {target} is configured but not checked out") from None
    if found.token:
        return f"a token will be sent to {location} ({found.source})"
    return f"no credential will be sent to {location}: {found.source}"


def clone(url: str, directory: str | None, store: str | None, remote: str = "origin") -> Iterator[str]:
    """Clone, configure, check out; yields what it did as it goes (the store, and whether a
    token goes to it, are shown before checkout starts talking to that store)."""
    from ..client.location import LocationError, is_local_store, parse_store_location

    target = Path(directory or _default_dir(url)).resolve()
    proc = run_git("clone", "--no-checkout", "--origin", remote, url, str(target), capture=False, timeout=LONG_GIT_TIMEOUT)
    if not proc.ok:
        raise GitError(f"git clone {url} failed ({proc.stderr or 'its message is above'})")
    yield f"cloned {url} into {target} (no checkout yet)"
    source = "--store"
    if store is None:
        store = run_git("config", "--blob", f"HEAD:{SHARED_CONFIG}", "--get", "xet.endpoint", cwd=target).value()
        source = f"{SHARED_CONFIG} in the repository"
    if not store:
        raise GitError(
            f"the repository names no XET store (no xet.endpoint in a committed {SHARED_CONFIG}); run "
            f"`git xet install --local --standalone STORE --remote {remote}` in {target}, then `git checkout`"
        )
    try:
        where = parse_store_location(store, relative_to=Path.cwd() if source == "--store" else None)
    except LocationError as exc:
        raise GitError(f"the XET store named by {source} is not usable: {exc}") from None
    if where.kind == "local" and not is_local_store(Path(where.location)):
        raise GitError(f"the XET store {where.location} (from {source}) does not exist here; is its drive mounted?")
    yield f"using the XET store {where.location} (from {source})"
    previous = Path.cwd()
    os.chdir(target)
    try:
        yield from install(Scope("--local"), where.location, remote, None, check_server=False)  # the checkout below reaches it, with the same advice
        yield _credential_line(where.location, target) if where.kind == "http" else "no XET token is involved (a directory or bucket store)"
        checkout = run_git("checkout", "--force", "HEAD", "--", capture=False, timeout=LONG_GIT_TIMEOUT)
    finally:
        os.chdir(previous)
    if not checkout.ok:
        raise GitError(f"checkout in {target} failed (its message is above); the clone is configured, retry with `git checkout HEAD -- .`")
    yield "checked out, LFS files from the XET store"
