"""Bearer tokens and signed xorb URLs, both HMAC-SHA256 under the server's secret.

Token: ``xet1.<base64url(json claims)>.<base64url(mac)>`` with claims ``{"scope": "read" |
"write", "exp": unix seconds, "repo": str}``. A write token can also read. Xorb URLs carry
their own signature over (xorb, byte range, expiry), so fetching them needs no token, and a
URL cannot be replayed for another range.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from ..storage.errors import RequestRefused

SCOPES = ("read", "write")
_PREFIX = "xet1"


class AuthError(RequestRefused):
    """401 (no, bad or expired credential) or 403 (valid credential, not allowed)."""


@dataclass(frozen=True)
class Claims:
    scope: str
    exp: int
    repo: str = "*"

    def allows(self, needed: str) -> bool:
        return self.scope == "write" or needed == "read"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def load_or_create_secret(data_dir: Path) -> bytes:
    """The server secret: $GIT_XET_SERVER_SECRET, else <data>/secret (created 0600 on first use)."""
    env = os.environ.get("GIT_XET_SERVER_SECRET")
    if env:
        return env.encode("utf-8")
    path = Path(data_dir) / "secret"
    try:
        return path.read_bytes().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    value = secrets.token_hex(32).encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(value)
    return value


class Signer:
    """Mints and checks tokens and URL signatures. Never logs or returns the secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the server secret must be at least 16 bytes")
        self._secret = secret

    def __repr__(self) -> str:
        return "Signer(<secret hidden>)"

    def _mac(self, purpose: str, message: bytes) -> bytes:
        return hmac.new(self._secret, purpose.encode("ascii") + b"\x00" + message, hashlib.sha256).digest()

    def derive_key(self, purpose: str) -> bytes:
        """A 32-byte key for another use (e.g. the dedup HMAC key of one rotation period)."""
        return self._mac("derive", purpose.encode("utf-8"))

    def mint(self, scope: str, ttl: int, repo: str = "*", now: float | None = None) -> tuple[str, int]:
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}")
        exp = int((time.time() if now is None else now) + ttl)
        payload = json.dumps({"scope": scope, "exp": exp, "repo": repo}, separators=(",", ":")).encode()
        body = _b64(payload)
        return f"{_PREFIX}.{body}.{_b64(self._mac('token', body.encode()))}", exp

    def verify(self, token: str | None, needed: str, now: float | None = None) -> Claims:
        """Claims of a valid token allowing `needed`; AuthError 401 (missing/invalid/expired) or 403."""
        if not token:
            raise AuthError(401, "missing bearer token")
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            raise AuthError(401, "malformed token")
        try:
            good = hmac.compare_digest(_unb64(parts[2]), self._mac("token", parts[1].encode()))
            claims_raw = json.loads(_unb64(parts[1])) if good else None
        except (ValueError, UnicodeDecodeError):
            raise AuthError(401, "malformed token") from None
        if not good or not isinstance(claims_raw, dict):
            raise AuthError(401, "invalid token signature")
        try:
            claims = Claims(str(claims_raw["scope"]), int(claims_raw["exp"]), str(claims_raw.get("repo", "*")))
        except (KeyError, TypeError, ValueError):
            raise AuthError(401, "malformed token claims") from None
        if claims.exp < (time.time() if now is None else now):
            raise AuthError(401, "token expired; request a new one")
        if not claims.allows(needed):
            raise AuthError(403, f"token scope '{claims.scope}' does not allow {needed}")
        return claims

    def sign_range(self, xorb_hex: str, start: int, end: int, exp: int) -> str:
        return _b64(self._mac("range", f"{xorb_hex}:{start}:{end}:{exp}".encode()))

    def check_range(self, xorb_hex: str, start: int, end: int, exp: int, sig: str, now: float | None = None) -> None:
        if exp < (time.time() if now is None else now):
            raise AuthError(403, "xorb URL expired; query the reconstruction again")
        try:
            given = _unb64(sig)
        except ValueError:
            raise AuthError(403, "malformed URL signature") from None
        if not hmac.compare_digest(given, _unb64(self.sign_range(xorb_hex, start, end, exp))):
            raise AuthError(403, "URL signature does not match this xorb and byte range")
