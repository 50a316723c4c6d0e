"""`git xet setup-repo URL`: make a repository's LFS endpoint a `git xet serve`, for everyone.

It writes `lfs.url` into the repository's `.lfsconfig` (which git-lfs reads from every clone)
and stages it: once committed, a plain `git clone` of the repository, by anyone, talks to the
server's Git LFS endpoint for that repository (`https://HOST/NS/NAME.git/info/lfs`). git-lfs
makes the batch calls itself there, so a teammate with the agent registered (`git xet
install`) transfers natively with XET, one with stock git-lfs uses `basic` (stored as XET on the
server), and prune's verification, push's "already there" and locks get the server's answers.

A clone set up in the older scoped mode (`git xet install --local --standalone ... --remote R`:
a synthetic `*.git-xet.invalid` LFS URL, the standalone agent) is moved in the same command: its
scoped keys are removed from `.git/config`, so the committed `.lfsconfig` decides.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from ..platform.gitcmd import run_git
from .install import AGENT, GitError

LFS_CONFIG = ".lfsconfig"


def endpoint_url(url: str) -> str:
    """The LFS endpoint for `url`: a repository's server URL (`https://HOST/NS/NAME`, with or
    without `.git`) or its endpoint (`.../NAME.git/info/lfs`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.path.strip("/") in ("", "info/lfs"):
        raise GitError(f"give the repository's URL on the server, e.g. https://xet.example.com/acme/models (got '{url}')")
    if parts.password or parts.username:
        raise GitError("leave credentials out of the URL (it is committed); store them with `git credential approve`")
    path = parts.path.rstrip("/").removesuffix("/info/lfs").removesuffix(".git")
    return f"{parts.scheme}://{parts.netloc}{path}.git/info/lfs"


def _scoped_keys() -> list[str]:
    """This clone's scoped-mode keys: synthetic lfsurls and the standalone routing for them."""
    listing = run_git("config", "--local", "--get-regexp", r"^(remote\..*\.lfsurl|lfs\..*\.standalonetransferagent)$").stdout
    keys = []
    for line in listing.splitlines():
        key, _, value = line.partition(" ")
        if (key.endswith(".lfsurl") and ".git-xet.invalid/" in value) or (key.endswith(".standalonetransferagent") and ".git-xet.invalid/" in key and value == AGENT):
            keys.append(key)
    return keys


def _overriding_keys() -> list[str]:
    """LFS URLs set in git config (which git-lfs prefers to .lfsconfig), left by hand or by
    another tool: reported, not removed (they may be meant)."""
    listing = run_git("config", "--name-only", "--get-regexp", r"^(lfs\.url|remote\..*\.lfsurl)$").stdout
    return sorted(set(listing.split()))


def setup_repo(url: str) -> list[str]:
    """Write and stage `.lfsconfig` naming `url`'s LFS endpoint; move a scoped-mode clone off its
    scoped keys. Lines of what was done."""
    top = run_git("rev-parse", "--show-toplevel").value()
    if top is None:
        raise GitError("run this inside the repository's work tree")
    endpoint = endpoint_url(url)
    done = []
    scoped = _scoped_keys()
    if scoped and run_git("config", "--local", "--get", "xet.endpoint").ok:
        scoped.append("xet.endpoint")  # the server's batch API names the store now
    for key in scoped:
        run_git("config", "--local", "--unset-all", key)
        done.append(f"removed the scoped-mode key {key} from .git/config (the committed {LFS_CONFIG} decides now)")
    written = run_git("config", "--file", f"{top}/{LFS_CONFIG}", "lfs.url", endpoint)
    if not written.ok:
        raise GitError(f"cannot write {LFS_CONFIG}: {written.stderr.strip()}")
    staged = run_git("add", "--", f"{top}/{LFS_CONFIG}")
    if not staged.ok:
        raise GitError(f"cannot stage {LFS_CONFIG}: {staged.stderr.strip()}")
    done.append(f"{LFS_CONFIG}: lfs.url = {endpoint} (staged: commit and push it; then a plain `git clone` uses it)")
    for key in _overriding_keys():
        done.append(f"note: {key} in your git config overrides {LFS_CONFIG} in this clone; remove it (`git config --unset {key}`) to use the server")
    if run_git("config", "--get", f"lfs.customtransfer.{AGENT}.path").value() is None:
        done.append("the transfer agent is not registered here: transfers use `basic`; run `git xet install` for native XET")
    return done
