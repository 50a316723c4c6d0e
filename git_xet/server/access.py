"""What a user token grants: one repository or a namespace pattern, and a role.

A token's `repo` claim is either one repo id (`ns/name`, `datasets/ns/name`) or a namespace
pattern `NS/*`, which covers every repo directly under NS and nothing else: `team/*` covers
`team/model`, never `team-evil/x` (another namespace that shares a prefix), `team/a/b` (a
deeper path) or `team/../x` (a dot segment a server or proxy could resolve elsewhere). The
role (the token's scope) is read < write < admin; admin also force-unlocks other users' locks.

Matching is by whole path segments, so no spelling of a repo id can reach outside the
pattern: a segment must be a plain name (letters, digits, `._-`, not starting with a dot).
"""

from __future__ import annotations

import re

ROLES = ("read", "write", "admin")
# A repo id's segment (the Hub's names are letters, digits, `-`, `_` and `.`).
_SEGMENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,95}")
# A user name: what locks show as their owner. No `:`, which the names of user-less tokens use.
_USER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@+-]{0,63}")
# A token minted without --user: its owner is this plus the token's id.
TOKEN_OWNER_PREFIX = "token:"


def role_allows(role: str, needed: str) -> bool:
    """Whether a token of `role` may do what needs `needed` (read < write < admin)."""
    return role in ROLES and needed in ROLES and ROLES.index(role) >= ROLES.index(needed)


def is_pattern(grant: str) -> bool:
    return grant.endswith("/*")


def _plain(segments: list[str]) -> bool:
    return bool(segments) and all(_SEGMENT.fullmatch(s) for s in segments)


def grant_covers(grant: str, repo: str) -> bool:
    """Whether a token's repo claim covers `repo`: the same repo, or a repo directly under the
    pattern's namespace."""
    if not is_pattern(grant):
        return grant == repo
    namespace = grant[:-2]
    head, sep, name = repo.rpartition("/")
    return bool(sep) and head == namespace and _plain([name]) and _plain(namespace.split("/"))


def check_grant(grant: str) -> str:
    """`grant` if a token may name it (ValueError saying what is wrong otherwise)."""
    if is_pattern(grant):
        if not _plain(grant[:-2].split("/")):
            raise ValueError(f"{grant!r} is not a namespace pattern: write NS/* (e.g. team/* or datasets/team/*)")
        return grant
    if "*" in grant:
        raise ValueError(f"{grant!r}: a pattern covers one whole namespace, written NS/* (e.g. team/*)")
    if not grant:
        raise ValueError("a token must name a repo (ns/name) or a namespace (ns/*)")
    return grant


def check_user(name: str) -> str:
    """`name` if it can name a token's user (ValueError otherwise)."""
    if not _USER.fullmatch(name):
        raise ValueError(f"{name!r} is not a user name: up to 64 letters, digits and ._@+- (starting with a letter, digit or _)")
    return name
