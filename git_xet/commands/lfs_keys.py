"""The agent's git-lfs registration keys, as git-lfs 3.7 and later read them.

git-lfs 3.7 (git-lfs PR 6252) ignores a standalone agent that is not a registered custom
adapter for the operation, and reads the `lfs.customtransfer.<name>.*` keys in one exact case.
git lowercases a key's section and variable but keeps its middle part as written, so
`lfs.customTransfer.xet.path` is a different key from `lfs.customtransfer.xet.path`: older
git-lfs read both, newer ones only the second. `git xet install` writes exactly the lowercase
keys, with the direction the agent serves (both: it uploads and downloads), and `git xet
doctor` reports keys in another case, which a hand edit or another tool may have left.
"""

from __future__ import annotations

from ..platform.gitcmd import run_git

AGENT = "xet"
PREFIX = f"lfs.customtransfer.{AGENT}."
DIRECTION = "both"  # the agent uploads and downloads


def registration() -> dict[str, str]:
    """The keys and values that register the agent, beyond path and args (see install.py)."""
    return {PREFIX + "concurrent": "true", PREFIX + "direction": DIRECTION}


def miscased_keys() -> list[str]:
    """Keys that name our adapter's settings in another case than git-lfs 3.7 reads."""
    listing = run_git("config", "--name-only", "--list")
    keys = listing.stdout.splitlines() if listing.ok else []
    return sorted({key for key in keys if key.lower().startswith(PREFIX) and not key.startswith(PREFIX)})


def direction_problem() -> str | None:
    """Why git-lfs would not use the agent for both operations, or None."""
    value = run_git("config", "--get", PREFIX + "direction").value()
    if value is None or value.lower() == DIRECTION:
        return None
    return f"{PREFIX}direction is '{value}': git-lfs uses the agent only to {value.lower()}"
