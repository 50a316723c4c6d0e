"""Hugging Face Hub emulation: the Git LFS batch API and the XET token routes.

This is what lets git-lfs (and our agent in server-negotiated mode) use this server the way
they use the Hub:

    POST /{repo}.git/info/lfs/objects/batch
        upload: with "xet" offered, transfer "xet"; each object the repo does not have gets an
        action whose header carries X-Xet-Cas-Url / X-Xet-Access-Token / X-Xet-Token-Expiration
        / X-Xet-Session-Id and whose href is the token refresh route. Otherwise (a stock
        git-lfs) "basic": the href is a PUT route that stores the object as XET
        (basic_uploads.py). Objects the repo has get no action.
        download: with "xet" offered, the action header also names the file (X-Xet-Hash);
        otherwise a "basic" href to the bridge, which streams the reconstructed file (or the
        Range asked for).
        `/git-xet.git/info/lfs` is the batch API of the repo the token names: standalone agents
        look oids up there without knowing a repo name.
    PUT /{repo}.git/info/lfs/basic/{oid}
        a basic upload: the whole object, stored as XET (basic_uploads.py).
    GET /xet-bridge-us/{repo}/{file}?exp=&sig=
        a basic download: the file, or the Range asked for (file_ranges.py).
    GET /api/{models|datasets|spaces}/{repo}/xet-{read|write}-token/{rev}
        {"casUrl", "exp", "accessToken"}, and the same as X-Xet-* headers.

The user's credential is a user token (`git xet token`), as `Authorization: Bearer` or as the
password of Basic auth (what git credential helpers send). It must name the repo of the route;
the CAS tokens minted here name the same repo and expire with it at the latest. Repo ids are the
Hub's: `ns/name` for models, `datasets/ns/name` and `spaces/ns/name` for the others.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Awaitable, Collection
from typing import Protocol
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core import hashes
from ..core.http_headers import ACCESS_TOKEN, CAS_URL, FILE_HASH, LFS_MEDIA_TYPE, SESSION_ID, TOKEN_EXPIRATION
from ..storage.cas_store import CasStore, StoredFile
from ..storage.errors import quota_exceeded
from .auth import KINDS, Claims, Signer, presented_token
from .basic_uploads import BasicUploads, upload_href
from .errors import RequestRefused, error_response, lfs_error_response
from .file_ranges import ranged_response
from .worker_threads import in_worker

REPO_KINDS = ("models", "datasets", "spaces")
STANDALONE_REPO_ALIAS = "git-xet"
# git-lfs sends at most 100 objects per batch (about 100 bytes each); these leave ample room.
MAX_BATCH_BODY = 256 * 1024
MAX_BATCH_OBJECTS = 1000


def repo_id(kind: str, name: str) -> str:
    """The Hub's repo id for a repo type and `ns/name`."""
    return name if kind == "models" else f"{kind}/{name}"


def split_repo_id(repo: str) -> tuple[str, str]:
    """(repo type, `ns/name`) of a repo id: the inverse of repo_id."""
    head, _, rest = repo.partition("/")
    return (head, rest) if head in ("datasets", "spaces") and rest else ("models", repo)


def _parse_batch(body: bytes) -> tuple[str, list, list]:
    """(operation, objects, transfers) of a batch request body; ValueError if malformed."""
    try:
        request = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("the body is not JSON") from None
    if not isinstance(request, dict):
        raise ValueError("the body is not a JSON object")
    operation, objects, transfers = request.get("operation"), request.get("objects"), request.get("transfers") or ["basic"]
    if operation not in ("upload", "download"):
        raise ValueError("operation must be upload or download")
    if not isinstance(objects, list) or not isinstance(transfers, list):
        raise ValueError("objects and transfers must be lists")
    return operation, objects, transfers


class HubSettings(Protocol):
    @property
    def cas_token_ttl(self) -> int:
        """Seconds a CAS token minted here lives (at most as long as its user token)."""

    @property
    def url_ttl(self) -> int:
        """Seconds a signed bridge URL is valid."""

    @property
    def idle_timeout(self) -> float:
        """Seconds a bridge download waits on a client that reads nothing."""


class HubHost(Protocol):
    """What the Hub emulation uses of the CAS app. state.ServerState provides it; it is named
    by its shape, which is all the emulation needs."""

    @property
    def store(self) -> CasStore: ...

    @property
    def signer(self) -> Signer: ...

    @property
    def config(self) -> HubSettings: ...

    async def authorize(self, request: Request, needed: str, token: str | None = None, kinds: Collection[str] = KINDS, repo: str | None = None) -> Claims: ...

    async def revoked(self) -> frozenset[str]: ...

    def read_body(self, request: Request, limit: int) -> Awaitable[bytes]: ...

    def base_url(self, request: Request) -> str: ...

    def whole_file(self, stored: StoredFile, headers: dict[str, str] | None = None) -> Response: ...


class HubEmulation:
    def __init__(self, cas: HubHost) -> None:
        self.cas = cas
        self.basic_uploads = BasicUploads(cas.store, cas.config.idle_timeout)

    async def _user(self, request: Request, needed: str, repo: str | None) -> tuple[Claims, str]:
        """The user token's claims and the repo it acts on: `repo` if the token covers it (None:
        the standalone alias, the one repo the token names)."""
        token = presented_token(request.headers.get("authorization", ""), basic=True) or ""
        claims = await self.cas.authorize(request, needed, token=token, kinds=("user",), repo=repo)
        return claims, claims.may(needed, repo)

    def _lookup(self, repo: str, oids: list[str]) -> dict:
        return {oid: self.cas.store.file_by_sha256(oid, repo) for oid in oids}

    def _quota_room(self, repo: str) -> tuple[int, int] | None:
        """(quota, logical bytes held) of a repo with a quota, else None."""
        index = self.cas.store.index
        quota = index.quotas().get(repo)
        return None if quota is None else (quota, index.logical_bytes(repo))

    async def batch(self, request: Request) -> Response:
        path_repo = request.path_params["repo"].removesuffix(".git").strip("/")
        try:  # credentials from headers first: nothing of the body is read for a stranger
            claims, repo = await self._user(request, "read", None if path_repo == STANDALONE_REPO_ALIAS else path_repo)
            body = await self.cas.read_body(request, MAX_BATCH_BODY)
        except RequestRefused as exc:
            return lfs_error_response(exc.status, exc.message)
        try:
            operation, objects, transfers = await in_worker(_parse_batch, body)
        except ValueError as exc:
            return lfs_error_response(422, f"malformed batch request: {exc}")
        if len(objects) > MAX_BATCH_OBJECTS:
            return lfs_error_response(413, f"at most {MAX_BATCH_OBJECTS} objects per batch request")
        needed = "write" if operation == "upload" else "read"
        if not claims.allows(needed):
            return lfs_error_response(403, f"token scope '{claims.scope}' does not allow {needed}")
        transfer = "xet" if "xet" in transfers else "basic"
        base = self.cas.base_url(request)
        token, exp = self.cas.signer.mint_cas(claims, needed, self.cas.config.cas_token_ttl, repo=repo)
        session = str(uuid.uuid4())
        valid = [o["oid"].lower() for o in objects if self._valid(o)]
        stored_by_oid = await in_worker(self._lookup, repo, valid)
        # A stock git-lfs retries a refused PUT (a 507) for half a minute: an object that cannot fit
        # is refused here, once, with the reason. The shard's registration still checks the total.
        room = await in_worker(self._quota_room, repo) if operation == "upload" and transfer == "basic" else None
        out = []
        for obj in objects:
            if not self._valid(obj):
                out.append({"oid": str(obj.get("oid") if isinstance(obj, dict) else None), "error": {"code": 422, "message": "invalid oid or size"}})
                continue
            oid, size = obj["oid"].lower(), obj["size"]
            stored = stored_by_oid[oid]
            entry: dict = {"oid": oid, "size": size, "authenticated": True}
            if stored is not None and stored.size != size:
                entry["error"] = {"code": 422, "message": f"object {oid} is stored with size {stored.size}, not {size}"}
            elif operation == "upload":
                if stored is None and transfer == "xet":
                    entry["actions"] = {"upload": self._xet_action(base, repo, "write", token, exp, session)}
                elif stored is None and room is not None and room[1] + size > room[0]:
                    entry["error"] = {"code": 507, "message": quota_exceeded(repo, room[0], room[1], size).message}
                elif stored is None:  # a stock git-lfs: the whole object, stored as XET here (basic_uploads.py)
                    entry["actions"] = {"upload": {"href": upload_href(base, repo, oid), "header": {"Authorization": f"Bearer {token}"}, "expires_in": max(1, exp - int(time.time()))}}
            elif stored is None:
                entry["error"] = {"code": 404, "message": "object not found"}
            elif transfer == "xet":
                action = self._xet_action(base, repo, "read", token, exp, session)
                action["header"][FILE_HASH] = stored.file_hex
                entry["actions"] = {"download": action}
            else:
                href, exp = self._bridge_url(base, claims, repo, stored.file_hex)
                entry["actions"] = {"download": {"href": href, "expires_in": max(1, exp - int(time.time()))}}
            out.append(entry)
        return JSONResponse({"transfer": transfer, "objects": out, "hash_algo": "sha256"}, media_type=LFS_MEDIA_TYPE)

    @staticmethod
    def _valid(obj: object) -> bool:
        if not isinstance(obj, dict):
            return False
        oid, size = obj.get("oid"), obj.get("size")
        return isinstance(oid, str) and len(oid) == 64 and hashes.is_hash_hex(oid) and isinstance(size, int) and not isinstance(size, bool) and size >= 0

    def _xet_action(self, base: str, repo: str, mode: str, token: str, exp: int, session: str) -> dict:
        kind, name = split_repo_id(repo)
        return {
            "href": f"{base}/api/{kind}/{name}/xet-{mode}-token/main",
            "header": {
                CAS_URL: base,
                ACCESS_TOKEN: token,
                TOKEN_EXPIRATION: str(exp),
                SESSION_ID: session,
            },
            "expires_in": max(1, exp - int(time.time())),
        }

    def _bridge_url(self, base: str, claims: Claims, repo: str, file_hex: str) -> tuple[str, int]:
        """(URL, expiry), shaped like the Hub's cas-bridge hrefs: the XET file hash is the last
        path segment; signed for (repo, file, expiry, token id) in a MAC domain of its own. It
        lives no longer than the token that asked for it, and dies with its revocation. `repo`:
        the one repo the request acts on (a namespace token's claims name a pattern)."""
        exp = min(int(time.time()) + self.cas.config.url_ttl, claims.exp)
        sig = self.cas.signer.sign_bridge(repo, file_hex, exp, claims.id)
        return f"{base}/xet-bridge-us/{repo}/{file_hex}?{urlencode({'exp': exp, 't': claims.id, 'sig': sig})}", exp

    async def basic_upload(self, request: Request) -> Response:
        """A `basic` upload's PUT: the token of the batch's action (or the user's, by a client
        that sends its own credentials) must allow writing to the path's repo."""
        path_repo = request.path_params["repo"].removesuffix(".git").strip("/")
        try:
            await self.cas.authorize(request, "write", token=presented_token(request.headers.get("authorization", ""), basic=True) or "", repo=path_repo)
        except RequestRefused as exc:
            return lfs_error_response(exc.status, exc.message)
        return await self.basic_uploads.put(request, path_repo)

    async def token_route(self, request: Request) -> Response:
        """Mint a CAS token from a user token of this repo (never from a CAS token)."""
        kind = request.path_params["kind"]
        if kind not in REPO_KINDS:
            return error_response(RequestRefused(404, f"unknown repo type {kind!r}"))
        mode = "write" if request.url.path.split("/")[-2] == "xet-write-token" else "read"
        claims, repo = await self._user(request, mode, repo_id(kind, request.path_params["repo"]))
        token, exp = self.cas.signer.mint_cas(claims, mode, self.cas.config.cas_token_ttl, repo=repo)
        base = self.cas.base_url(request)
        headers = {CAS_URL: base, ACCESS_TOKEN: token, TOKEN_EXPIRATION: str(exp), "Cache-Control": "no-store"}
        return JSONResponse({"casUrl": base, "exp": exp, "accessToken": token}, headers=headers)

    def _bridge_file(self, repo: str, file_hex: str):
        return self.cas.store.get_file(file_hex) if self.cas.store.repo_has_file(repo, file_hex) else None

    async def bridge(self, request: Request) -> Response:
        """Serve a file (or the byte range asked for: how git-lfs resumes) by reconstructing it
        here: how plain `basic` git-lfs downloads."""
        repo, file_hex = request.path_params["repo"], request.path_params["file"].lower()
        if not hashes.is_hash_hex(file_hex):
            return error_response(RequestRefused(400, "invalid file hash"))
        try:
            exp, sig, token_id = int(request.query_params["exp"]), request.query_params["sig"], request.query_params["t"]
        except (KeyError, ValueError):
            return error_response(RequestRefused(403, "not a signed download URL"))
        self.cas.signer.check_bridge(repo, file_hex, exp, sig, token_id)
        if token_id in await self.cas.revoked():
            return error_response(RequestRefused(403, "the token this URL was issued to is revoked; run the git command again"))
        stored = await in_worker(self._bridge_file, repo, file_hex)
        if stored is None:
            return error_response(RequestRefused(404, "file not found"))
        whole = self.cas.whole_file(stored, {"Accept-Ranges": "bytes"})
        return ranged_response(self.cas.store, stored, request.headers.get("range"), self.cas.config.idle_timeout, whole)


def hub_routes(hub: HubEmulation) -> list[Route]:
    return [
        Route("/{repo:path}/info/lfs/objects/batch", hub.batch, methods=["POST"]),
        Route("/{repo:path}/info/lfs/basic/{oid}", hub.basic_upload, methods=["PUT"]),
        Route("/api/{kind}/{repo:path}/xet-read-token/{rev}", hub.token_route),
        Route("/api/{kind}/{repo:path}/xet-write-token/{rev}", hub.token_route),
        Route("/xet-bridge-us/{repo:path}/{file}", hub.bridge),
    ]
