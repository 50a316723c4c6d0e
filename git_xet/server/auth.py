"""Bearer tokens and signed URLs, all HMAC-SHA256 under the server's secret.

Token: ``xet1.<base64url(json claims)>.<base64url(mac)>`` with claims ``{"kind", "id", "scope",
"exp", "repo"}`` and, for a token minted with --user, ``"user"``. Two kinds:

- ``user``: what `git xet token` mints and what people store in git credentials or
  `xet.token`. Long-lived; `id` is its own random id, which `git xet token --revoke` puts on the
  revocation list in the index, without rotating the secret.
- ``cas``: minted by the LFS batch API and the Hub token routes from a user token; short-lived,
  never outliving its parent, carrying the parent's `id` (revoking the parent revokes it). Only
  user tokens may mint tokens, so a CAS token leaked in a trace dies within minutes.

`repo` names the one repo the token acts on, or a namespace pattern `NS/*` (server/access.py);
`scope` is read, write (also reads) or admin (also writes, and force-unlocks). `user` names who
owns the locks the token takes; a token without one (minted before users existed, or without
--user) is its own user, `token:<id>`. A CAS token always names the one repo it was minted for.
Signed URLs use their own MAC domains: a xorb URL is bound to (xorb, byte range, expiry, token
id), a bridge URL to (repo, file, expiry, token id); neither can be replayed as the other, and
the server refuses both once their token is revoked.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from ..core.token_format import PREFIX as _PREFIX
from ..core.token_format import b64 as _b64
from ..core.token_format import unb64 as _unb64
from . import access
from .errors import RequestRefused, SecretError

SCOPES = access.ROLES
KINDS = ("user", "cas")
MIN_SECRET_BYTES = 16
# How many correctly signed tokens a Signer remembers with their claims (see Signer.verify).
VERIFIED_TOKENS = 4096


class AuthError(RequestRefused):
    """401 (no, bad, expired or revoked credential) or 403 (valid credential, not allowed)."""


@dataclass(frozen=True)
class Claims:
    kind: str  # "user" or "cas"
    id: str  # the user token's id (a CAS token carries its parent's)
    scope: str
    exp: int
    repo: str  # one repo id, or a namespace pattern NS/* (user tokens only)
    user: str = ""  # "" for tokens minted without --user

    @property
    def owner(self) -> str:
        """The user the token acts as (the owner of the locks it takes)."""
        return self.user or access.TOKEN_OWNER_PREFIX + self.id

    def allows(self, needed: str) -> bool:
        return access.role_allows(self.scope, needed)

    def may(self, needed: str, repo: str | None = None) -> str:
        """The repo this token acts on for a request needing `needed` on `repo` (None: the one
        repo the token names); AuthError 403 if it may not. Every route decides here."""
        if repo is None:
            if access.is_pattern(self.repo):
                raise AuthError(
                    403,
                    f"this token covers the namespace {self.repo}, not one repo: use a repo's LFS endpoint "
                    f"(https://HOST/{self.repo[:-2]}/NAME.git/info/lfs), or mint a token with `git xet token --repo {self.repo[:-2]}/NAME`",
                )
            repo = self.repo
        elif not access.grant_covers(self.repo, repo):
            raise AuthError(403, f"this token is for another repo than {repo}; mint one with `git xet token --repo {repo}`")
        if not self.allows(needed):
            raise AuthError(403, f"token scope '{self.scope}' does not allow {needed} on {repo}")
        return repo


def presented_token(authorization: str, *, basic: bool = False) -> str | None:
    """The token an Authorization header presents: a Bearer token or, with `basic`, the
    password of Basic auth (what git credential helpers send to the LFS batch API); None for
    anything else."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if basic and scheme.lower() == "basic":
        try:
            _user, _, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return password
    return None


def read_secret_file(path: Path) -> bytes:
    """A secret kept in a file (--secret-file: a mounted secret, shared by every replica)."""
    try:
        value = Path(path).read_bytes().strip()
    except OSError as exc:
        raise SecretError(f"cannot read the secret file {path}: {exc.strerror or exc}") from None
    if len(value) < MIN_SECRET_BYTES:
        raise SecretError(
            f"{path} holds {len(value)} bytes; the secret must be at least {MIN_SECRET_BYTES}. If this server had a secret "
            f"before, give that file (its data directory's `secret`) to keep every token valid; for a new one run "
            f"`(umask 077 && openssl rand -hex 32 > {path})`"
        )
    _warn_if_others_can_read(Path(path))
    return value


def _warn_if_others_can_read(path: Path) -> None:
    """Anyone who can read the secret can mint a token for any repo: say so, with the fix. The
    file is not chmodded here: it may be a mounted secret the server does not own."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return
    if os.name == "posix" and mode & 0o077:
        logging.getLogger(__name__).warning(
            "git-xet: the server secret %s can be read by other users (mode %o); anyone who reads it can mint tokens "
            "for every repo: run chmod 600 %s",
            path, mode, path,
        )  # fmt: skip


def load_secret(data_dir: Path | None, secret_file: Path | None = None, shared: bool = False) -> bytes:
    """The server secret: $GIT_XET_SERVER_SECRET, else `secret_file`, else <data>/secret
    (created 0600 on first use). `shared` (replicas on a shared index): the data directory is
    not where a secret every replica must hold can come from, so one of the first two is required."""
    env = os.environ.get("GIT_XET_SERVER_SECRET")
    if env:
        return env.encode("utf-8")
    if secret_file is not None:
        return read_secret_file(secret_file)
    if shared:
        raise SecretError(_shared_secret_missing(data_dir))
    if data_dir is None:
        raise SecretError("no server secret: set $GIT_XET_SERVER_SECRET, or pass --secret-file or --data")
    return load_or_create_secret(data_dir)


def _shared_secret_missing(data_dir: Path | None) -> str:
    """Why a server on a shared index will not start without --secret-file, and the fix that keeps
    existing tokens valid: the data directory's own secret, named as a file (a new secret would
    void every token and signed URL minted so far)."""
    start = "with a shared index every replica needs the same secret, from --secret-file or $GIT_XET_SERVER_SECRET"
    existing = Path(data_dir) / "secret" if data_dir is not None else None
    if existing is not None and existing.exists():
        return (
            f"{start}: to keep the tokens minted so far, pass --secret-file {existing} (this data directory's secret; "
            f"copy it to every replica). A new secret would void every token"
        )
    return f"{start}: for a new server, make one with `(umask 077 && openssl rand -hex 32 > FILE)` and pass --secret-file FILE"


def load_or_create_secret(data_dir: Path) -> bytes:
    """The secret in <data>/secret (created 0600 on first use), or $GIT_XET_SERVER_SECRET."""
    env = os.environ.get("GIT_XET_SERVER_SECRET")
    if env:
        return env.encode("utf-8")
    path = Path(data_dir) / "secret"
    try:
        value = path.read_bytes().strip()
    except FileNotFoundError:
        pass
    else:
        if len(value) < MIN_SECRET_BYTES:
            raise SecretError(
                f"{path} holds {len(value)} bytes; the secret must be at least {MIN_SECRET_BYTES}. "
                f"Delete the file to have a new one generated (every token minted so far stops working), "
                f"or put the old secret back"
            )
        _warn_if_others_can_read(path)
        return value
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    value = secrets.token_hex(32).encode("ascii")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(value)
    return value


class Signer:
    """Mints and checks tokens and URL signatures. Never logs or returns the secret."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise SecretError(f"the server secret must be at least {MIN_SECRET_BYTES} bytes (check $GIT_XET_SERVER_SECRET)")
        self._secret = secret
        self._verified: dict[str, Claims] = {}  # token -> its claims, signature checked (verify)

    def __repr__(self) -> str:
        return "Signer(<secret hidden>)"

    def _mac(self, purpose: str, message: bytes) -> bytes:
        return hmac.new(self._secret, purpose.encode("ascii") + b"\x00" + message, hashlib.sha256).digest()

    def derive_key(self, purpose: str) -> bytes:
        """A 32-byte key for another use (e.g. the dedup HMAC key of one rotation period)."""
        return self._mac("derive", purpose.encode("utf-8"))

    # ------------------------------------------------------------------ tokens

    def _encode(self, claims: Claims) -> str:
        payload = {"kind": claims.kind, "id": claims.id, "scope": claims.scope, "exp": claims.exp, "repo": claims.repo}
        if claims.user:
            payload["user"] = claims.user
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        return f"{_PREFIX}.{body}.{_b64(self._mac('token', body.encode()))}"

    def mint_user(self, scope: str, ttl: int, repo: str, now: float | None = None, user: str = "") -> tuple[str, Claims]:
        """A user token (and its claims, for the id): what people keep in their credentials.
        `repo` is one repo or a pattern NS/*; `user` names its owner (ValueError if malformed)."""
        if scope not in SCOPES:
            raise ValueError(f"scope must be one of {SCOPES}")
        access.check_grant(repo)
        if user:
            access.check_user(user)
        claims = Claims("user", secrets.token_hex(8), scope, int((time.time() if now is None else now) + ttl), repo, user)
        return self._encode(claims), claims

    def mint_cas(self, parent: Claims, scope: str, ttl: int, now: float | None = None, repo: str | None = None) -> tuple[str, int]:
        """A short CAS token for one repo the parent user token covers (None: the one it names);
        it expires with its parent at the latest and never allows more than `scope` (read or write)."""
        if parent.kind != "user":
            raise AuthError(403, "only a user token can mint CAS tokens")
        if scope not in ("read", "write"):
            raise ValueError("a CAS token reads or writes")
        target = parent.may(scope, repo)
        exp = min(parent.exp, int((time.time() if now is None else now) + ttl))
        return self._encode(Claims("cas", parent.id, scope, exp, target, parent.user)), exp

    def verify(
        self,
        token: str | None,
        needed: str,
        revoked: Collection[str] = (),
        kinds: Collection[str] = KINDS,
        now: float | None = None,
    ) -> Claims:
        """Claims of a valid token of one of `kinds` allowing `needed`; AuthError 401 or 403."""
        if not token:
            raise AuthError(401, "missing bearer token")
        claims = self._verified.get(token)
        if claims is None:
            claims = self._signed_claims(token)
            if len(self._verified) >= VERIFIED_TOKENS:
                self._verified.clear()
            self._verified[token] = claims
        if claims.exp < (time.time() if now is None else now):
            raise AuthError(401, "token expired; request a new one")
        if claims.id in revoked:
            raise AuthError(401, "token revoked; ask the server's operator for a new one")
        if claims.kind not in kinds:
            raise AuthError(401, f"a {claims.kind} token is not accepted here; use your user token (`git xet token`)")
        if not claims.allows(needed):
            raise AuthError(403, f"token scope '{claims.scope}' does not allow {needed}")
        return claims

    def _signed_claims(self, token: str) -> Claims:
        """The claims a token carries, if this server signed it; AuthError 401 otherwise.

        What verify remembers per token: a push of a thousand small files presents one token
        a thousand times, and this (an HMAC, base64 and JSON) was 0.1 M of the server's 4.3 M
        instructions per small-file upload. Only tokens signed with our secret are remembered, so nobody without
        it can fill the memory; expiry, revocation, kind and scope are checked at every use."""
        parts = token.split(".")
        if len(parts) != 3 or parts[0] != _PREFIX:
            raise AuthError(401, "malformed token")
        try:
            good = hmac.compare_digest(_unb64(parts[2]), self._mac("token", parts[1].encode()))
            raw = json.loads(_unb64(parts[1])) if good else None
        except (ValueError, UnicodeDecodeError):
            raise AuthError(401, "malformed token") from None
        if not good or not isinstance(raw, dict):
            raise AuthError(401, "invalid token signature")
        try:
            return Claims(str(raw["kind"]), str(raw["id"]), str(raw["scope"]), int(raw["exp"]), str(raw["repo"]), str(raw.get("user", "")))
        except (KeyError, TypeError, ValueError):
            raise AuthError(401, "token from an older git-xet server; mint a new one with `git xet token --repo REPO`") from None

    def claims_of(self, token: str) -> Claims:
        """Claims of a correctly signed token, expired or not (to revoke it by value)."""
        return self.verify(token, "read", now=0)

    # ------------------------------------------------------------------ signed URLs

    # A URL carries the id of the token it was issued to, so that revoking the token stops it.

    def sign_range(self, xorb_hex: str, start: int, end: int, exp: int, token_id: str) -> str:
        return _b64(self._mac("xorb-range", json.dumps([xorb_hex, start, end, exp, token_id]).encode()))

    def check_range(self, xorb_hex: str, start: int, end: int, exp: int, sig: str, token_id: str, now: float | None = None) -> None:
        self._check(self.sign_range(xorb_hex, start, end, exp, token_id), sig, exp, now, "xorb URL expired; query the reconstruction again")

    def sign_bridge(self, repo: str, file_hex: str, exp: int, token_id: str) -> str:
        return _b64(self._mac("bridge", json.dumps([repo, file_hex, exp, token_id]).encode()))

    def check_bridge(self, repo: str, file_hex: str, exp: int, sig: str, token_id: str, now: float | None = None) -> None:
        self._check(self.sign_bridge(repo, file_hex, exp, token_id), sig, exp, now, "download URL expired; run the git command again")

    @staticmethod
    def _check(expected: str, sig: str, exp: int, now: float | None, expired: str) -> None:
        if exp < (time.time() if now is None else now):
            raise AuthError(403, expired)
        try:
            given = _unb64(sig)
        except ValueError:
            raise AuthError(403, "malformed URL signature") from None
        if not hmac.compare_digest(given, _unb64(expected)):
            raise AuthError(403, "URL signature does not match what this URL serves")
