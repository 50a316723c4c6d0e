"""Hugging Face Hub emulation: the Git LFS batch API and the XET token routes.

This is what lets git-lfs (and our agent in server-negotiated mode) use this server the way
they use the Hub:

    POST /{repo}.git/info/lfs/objects/batch
        upload: transfer "xet"; each missing object gets an action whose header carries
        X-Xet-Cas-Url / X-Xet-Access-Token / X-Xet-Token-Expiration / X-Xet-Session-Id and
        whose href is the token refresh route. Objects already stored get no action.
        download: with "xet" offered, the action header also names the file (X-Xet-Hash);
        otherwise a "basic" href to the bridge, which streams the reconstructed file.
    GET /api/{models|datasets|spaces}/{repo}/xet-{read|write}-token/{rev}
        {"casUrl", "exp", "accessToken"}, and the same as X-Xet-* headers.

The user's credential is one of our tokens, as `Authorization: Bearer` or as the password of
Basic auth (what git credential helpers send).
"""

from __future__ import annotations

import base64
import time
import uuid
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..core import hashes
from .auth import AuthError

LFS_MEDIA_TYPE = "application/vnd.git-lfs+json"
REPO_KINDS = ("models", "datasets", "spaces")


def _user_token(request: Request) -> str | None:
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            _user, _, password = base64.b64decode(value.strip()).decode("utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return password
    return None


def _lfs_error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"message": message}, status_code=status, media_type=LFS_MEDIA_TYPE)


class HubEmulation:
    def __init__(self, cas) -> None:  # cas: app.CasApp (not imported: app imports us)
        self.cas = cas

    def _base(self, request: Request) -> str:
        return (self.cas.config.public_url or str(request.base_url)).rstrip("/")

    def _cas_token(self, scope: str, repo: str) -> tuple[str, int]:
        return self.cas.signer.mint(scope, self.cas.config.cas_token_ttl, repo)

    async def batch(self, request: Request) -> Response:
        repo = request.path_params["repo"].removesuffix(".git").strip("/")
        try:
            body = await request.json()
            operation = body["operation"]
            objects = body["objects"]
            if operation not in ("upload", "download") or not isinstance(objects, list):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            return _lfs_error(422, "malformed batch request")
        needed = "write" if operation == "upload" else "read"
        try:
            self.cas.signer.verify(_user_token(request), needed)
        except AuthError as exc:
            response = _lfs_error(exc.status, exc.message)
            if exc.status == 401:
                response.headers["LFS-Authenticate"] = 'Basic realm="git-xet"'
            return response
        transfers = body.get("transfers") or ["basic"]
        base = self._base(request)
        kind = "models"
        if operation == "upload" and "xet" not in transfers:
            return _lfs_error(422, "this server stores LFS objects with XET only: install git-xet (`git xet install`)")
        transfer = "xet" if "xet" in transfers else "basic"
        token, exp = self._cas_token(needed, repo)
        session = str(uuid.uuid4())
        out = []
        for obj in objects:
            oid, size = obj.get("oid"), obj.get("size")
            if not isinstance(oid, str) or len(oid) != 64 or not hashes.is_hash_hex(oid) or not isinstance(size, int) or size < 0:
                out.append({"oid": str(oid), "size": size, "error": {"code": 422, "message": "invalid oid or size"}})
                continue
            stored = self.cas.store.file_by_sha256(oid)
            entry: dict = {"oid": oid, "size": size, "authenticated": True}
            if operation == "upload":
                if stored is None:
                    entry["actions"] = {"upload": self._xet_action(base, kind, repo, "write", token, exp, session)}
            elif stored is None:
                entry["error"] = {"code": 404, "message": "object not found"}
            elif transfer == "xet":
                action = self._xet_action(base, kind, repo, "read", token, exp, session)
                action["header"]["X-Xet-Hash"] = stored.hash
                entry["actions"] = {"download": action}
            else:
                entry["actions"] = {"download": {"href": self._bridge_url(base, repo, stored.hash), "expires_in": self.cas.config.url_ttl}}
            out.append(entry)
        return JSONResponse({"transfer": transfer, "objects": out, "hash_algo": "sha256"}, media_type=LFS_MEDIA_TYPE)

    def _xet_action(self, base: str, kind: str, repo: str, mode: str, token: str, exp: int, session: str) -> dict:
        return {
            "href": f"{base}/api/{kind}/{repo}/xet-{mode}-token/main",
            "header": {
                "X-Xet-Cas-Url": base,
                "X-Xet-Access-Token": token,
                "X-Xet-Token-Expiration": str(exp),
                "X-Xet-Session-Id": session,
            },
            "expires_in": max(1, exp - int(time.time())),
        }

    def _bridge_url(self, base: str, repo: str, file_hex: str) -> str:
        """Shaped like the Hub's cas-bridge hrefs: the XET file hash is the last path segment."""
        exp = int(time.time()) + self.cas.config.url_ttl
        sig = self.cas.signer.sign_range(file_hex, 0, 0, exp)
        return f"{base}/xet-bridge-us/{repo}/{file_hex}?{urlencode({'exp': exp, 'sig': sig})}"

    async def token_route(self, request: Request) -> Response:
        kind = request.path_params["kind"]
        if kind not in REPO_KINDS:
            return JSONResponse({"error": f"unknown repo type {kind!r}"}, status_code=404)
        mode = "write" if request.url.path.split("/")[-2] == "xet-write-token" else "read"
        self.cas.signer.verify(_user_token(request), mode)
        repo = request.path_params["repo"]
        token, exp = self._cas_token(mode, repo)
        base = self._base(request)
        headers = {"X-Xet-Cas-Url": base, "X-Xet-Access-Token": token, "X-Xet-Token-Expiration": str(exp), "Cache-Control": "no-store"}
        return JSONResponse({"casUrl": base, "exp": exp, "accessToken": token}, headers=headers)

    async def bridge(self, request: Request) -> Response:
        """Serve a whole file by reconstructing it here: how plain `basic` git-lfs downloads."""
        file_hex = request.path_params["file"]
        if not hashes.is_hash_hex(file_hex):
            return JSONResponse({"error": "invalid file hash"}, status_code=400)
        try:
            exp, sig = int(request.query_params["exp"]), request.query_params["sig"]
        except (KeyError, ValueError):
            return JSONResponse({"error": "not a signed download URL"}, status_code=403)
        self.cas.signer.check_range(file_hex.lower(), 0, 0, exp, sig)
        stored = self.cas.store.get_file(file_hex)
        if stored is None:
            return JSONResponse({"error": "file not found"}, status_code=404)
        return StreamingResponse(
            self.cas.store.iter_file_bytes(stored),
            media_type="application/octet-stream",
            headers={"Content-Length": str(stored.size)},
        )


def hub_routes(hub: HubEmulation) -> list[Route]:
    return [
        Route("/{repo:path}/info/lfs/objects/batch", hub.batch, methods=["POST"]),
        Route("/api/{kind}/{repo:path}/xet-read-token/{rev}", hub.token_route),
        Route("/api/{kind}/{repo:path}/xet-write-token/{rev}", hub.token_route),
        Route("/xet-bridge-us/{repo:path}/{file}", hub.bridge),
    ]
