"""HTTP names of the XET and Git LFS protocols, spelled once for the server and the clients.

The `X-Xet-*` headers are how an LFS batch answer (the Hub's, or our server's emulation of it)
hands an XET transfer to the client: where the CAS is, a short-lived token for it, when that
expires, the session, and for downloads the file's XET hash. HTTP header names are
case-insensitive; these are the spellings the Hub sends, and readers compare lower-cased.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

CAS_URL = "X-Xet-Cas-Url"
ACCESS_TOKEN = "X-Xet-Access-Token"
TOKEN_EXPIRATION = "X-Xet-Token-Expiration"
SESSION_ID = "X-Xet-Session-Id"
FILE_HASH = "X-Xet-Hash"
# Ours: the key of a shard upload's answer (its `result` frame) that lists the files (hashes)
# registered without their sha256 claim, which did not match their content.
REFUSED_SHA256 = "refused_sha256"

LFS_MEDIA_TYPE = "application/vnd.git-lfs+json"


def new_session_id() -> str:
    """A fresh X-Xet-Session-Id: a random (version 4) UUID, as hf-xet sends, made here rather
    than by the uuid module, which imports platform with it (~3 ms in each of a push's agents)."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def bearer(token: str) -> dict[str, str]:
    """The Authorization header that presents `token`."""
    return {"Authorization": f"Bearer {token}"}


def header_value(headers: Mapping[str, str] | None, name: str) -> str | None:
    """Header `name` of a plain mapping (a batch action's JSON `header`), matched as HTTP
    matches names: case-insensitively."""
    wanted = name.lower()
    for key, value in (headers or {}).items():
        if key.lower() == wanted:
            return value
    return None
