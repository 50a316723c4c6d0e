"""The text form of a `git xet serve` token: `xet1.<payload>.<mac>`, the payload base64url JSON.

The server (server/auth.py) signs and verifies tokens; a client only reads the payload's
`repo`, unverified, to name the repository a token is for in its messages and in doctor
("your token is for repo 'alice/model'"): tokens for different repositories push into
different namespaces, and a user who cannot see which one a token names cannot tell why a
teammate's push is missing. Reading it grants nothing: the server checks the MAC.
"""

from __future__ import annotations

import base64
import json

PREFIX = "xet1"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def unverified_repo(token: str | None) -> str | None:
    """The repo a git-xet token names, as its payload says (None: not a git-xet token)."""
    parts = (token or "").split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        return None
    try:
        payload = json.loads(unb64(parts[1]))
    except (ValueError, UnicodeDecodeError):
        return None
    repo = payload.get("repo") if isinstance(payload, dict) else None
    return repo if isinstance(repo, str) and repo else None
