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
import subprocess
from pathlib import Path

from .install import GitError, Scope, install

SHARED_CONFIG = ".xetconfig"


def _git(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=3600, check=False)


def _default_dir(url: str) -> str:
    """The directory `git clone` would pick for URL."""
    name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
    return name.removesuffix(".git") or "repo"


def clone(url: str, directory: str | None, store: str | None, remote: str = "origin") -> list[str]:
    from ..client.location import LocationError, is_local_store, parse_store_location

    target = Path(directory or _default_dir(url)).resolve()
    proc = subprocess.run(["git", "clone", "--no-checkout", "--origin", remote, url, str(target)], text=True, timeout=3600, check=False)
    if proc.returncode != 0:
        raise GitError(f"git clone {url} failed (its message is above)")
    done = [f"cloned {url} into {target} (no checkout yet)"]
    source = "--store"
    if store is None:
        shared = _git("config", "--blob", f"HEAD:{SHARED_CONFIG}", "--get", "xet.endpoint", cwd=target)
        store, source = shared.stdout.strip() or None, f"{SHARED_CONFIG} in the repository"
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
    done.append(f"using the XET store {where.location} (from {source})")
    previous = Path.cwd()
    os.chdir(target)
    try:
        done += install(Scope("--local"), where.location, remote, None)
        checkout = subprocess.run(["git", "checkout", "--force", "HEAD", "--"], text=True, timeout=3600, check=False)
    finally:
        os.chdir(previous)
    if checkout.returncode != 0:
        raise GitError(f"checkout in {target} failed (its message is above); the clone is configured, retry with `git checkout HEAD -- .`")
    done.append("checked out, LFS files from the XET store")
    return done
