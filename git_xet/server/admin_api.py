"""The admin HTTP API: what `git xet usage`, `git xet repo delete|prune|restore|quota`, a forced
unlock and a token revocation do, as JSON, for scripts (docs/operations.md):

    GET  /admin/api/usage[?repo=R]      usage and dedup per repository and in total (usage --json)
    POST /admin/api/repos/delete        {"repo"}: trash every file of the repository  -> {"files"}
    POST /admin/api/repos/prune         {"repo", "keep": [oid...]} or {"repo", "drop": [oid...]} -> {"files"}
    POST /admin/api/repos/restore       {"repo"}: undo its deletions still in the trash -> {"files"}
    GET  /admin/api/quotas              every quota, with what each repository holds
    POST /admin/api/repos/quota         {"repo", "max_bytes": N or null}               -> the repo's quota
    GET  /admin/api/locks[?repo=R]      Git LFS locks
    POST /admin/api/locks/unlock        {"repo", "id"}: release a lock whoever holds it  -> the lock
    GET  /admin/api/tokens              the revocation list
    POST /admin/api/tokens/revoke       {"token"} (a user token) or {"id"}               -> {"id"}

Only the admin token opens it ($GIT_XET_ADMIN_TOKEN, sent as `Authorization: Bearer TOKEN`):
not the admin page's cookie (a script has none, and a state change by cookie would need the
page's form protection), and never a user's token, whatever its scope.
"""

from __future__ import annotations

import hmac
import itertools
import json
import re
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..storage.retention import delete_repo, prune_repo, restore_repo
from ..storage.usage import usage
from .auth import presented_token
from .errors import RequestRefused
from .operator import ADMIN_TOKEN_ENV, admin_token
from .worker_threads import in_worker

if TYPE_CHECKING:
    from .state import ServerState

MAX_BODY = 16 * 1024 * 1024  # a keep list of ~200k oids
MAX_LOCKS = 10_000
_OID = re.compile(r"^[0-9a-f]{64}$")


def _answer(body: object) -> Response:
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


def _field(body: dict[str, Any], name: str) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise RequestRefused(422, f'give "{name}" as a non-empty string in the JSON body')
    return value


def _oids(body: dict[str, Any], name: str) -> set[str] | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(o, str) and _OID.match(o.lower()) for o in value):
        raise RequestRefused(422, f'"{name}" must be a list of sha256 oids (64 hex digits each)')
    return {o.lower() for o in value}


class AdminApi:
    """Handlers of the admin API for one ServerState."""

    def __init__(self, app: ServerState) -> None:
        self.app = app
        self.token = admin_token()

    @property
    def index(self) -> Any:
        return self.app.store.index

    def _require(self, request: Request) -> None:
        if self.token is None:
            raise RequestRefused(403, f"admin routes are off: start the server with ${ADMIN_TOKEN_ENV} set (see docs/operations.md)")
        bearer = presented_token(request.headers.get("authorization", ""))
        if bearer is None or not hmac.compare_digest(bearer.encode(), self.token):
            raise RequestRefused(401, "this route needs the server's admin token: send Authorization: Bearer $GIT_XET_ADMIN_TOKEN")

    async def _body(self, request: Request) -> dict[str, Any]:
        self._require(request)
        raw = await self.app.read_body(request, MAX_BODY)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise RequestRefused(422, "the body must be a JSON object")
        return body

    # ------------------------------------------------------------------ usage and repositories

    async def usage(self, request: Request) -> Response:
        self._require(request)
        report = await in_worker(usage, self.index)
        repo = request.query_params.get("repo")
        rows = [r.as_json() for r in report.repos if repo is None or r.repo == repo]
        return _answer({"repos": rows, "total": report.total.as_json()})

    async def delete(self, request: Request) -> Response:
        repo = _field(await self._body(request), "repo")
        return _answer({"repo": repo, "files": await in_worker(delete_repo, self.index, repo)})

    async def prune(self, request: Request) -> Response:
        body = await self._body(request)
        repo, keep, drop = _field(body, "repo"), _oids(body, "keep"), _oids(body, "drop")
        if (keep is None) == (drop is None):
            raise RequestRefused(422, 'give "keep" (the oids to keep) or "drop" (the oids to delete), not both')
        return _answer({"repo": repo, "files": await in_worker(prune_repo, self.index, repo, keep, drop)})

    async def restore(self, request: Request) -> Response:
        repo = _field(await self._body(request), "repo")
        return _answer({"repo": repo, "files": await in_worker(restore_repo, self.index, repo)})

    # ------------------------------------------------------------------ quotas

    def _quota(self, repo: str) -> dict[str, object]:
        return {"repo": repo, "max_bytes": self.index.quotas().get(repo), "logical_bytes": self.index.logical_bytes(repo)}

    async def quotas(self, request: Request) -> Response:
        self._require(request)

        def read() -> list[dict[str, object]]:
            return [self._quota(repo) for repo in self.index.quotas()]

        return _answer({"quotas": await in_worker(read)})

    async def set_quota(self, request: Request) -> Response:
        body = await self._body(request)
        repo, limit = _field(body, "repo"), body.get("max_bytes")
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise RequestRefused(422, '"max_bytes" must be a number of bytes (0 or more), or null to remove the quota')

        def write() -> dict[str, object]:
            self.index.set_quota(repo, limit)
            return self._quota(repo)

        return _answer(await in_worker(write))

    # ------------------------------------------------------------------ locks and tokens

    async def locks(self, request: Request) -> Response:
        self._require(request)
        repo = request.query_params.get("repo")

        def read() -> list[dict[str, object]]:
            rows = (r for r in self.index.export_rows("locks") if repo is None or r[1] == repo)
            return [dict(zip(("id", "repo", "path", "owner", "ref", "locked_at"), r)) for r in itertools.islice(rows, MAX_LOCKS)]

        return _answer({"locks": await in_worker(read)})

    async def unlock(self, request: Request) -> Response:
        body = await self._body(request)
        repo, lock_id = _field(body, "repo"), _field(body, "id")
        lock, deleted = await in_worker(self.index.delete_lock, repo, lock_id, None)
        if lock is None or not deleted:
            raise RequestRefused(404, f"repository {repo} has no lock {lock_id}")
        return _answer(lock._asdict())

    async def tokens(self, request: Request) -> Response:
        self._require(request)
        rows = await in_worker(lambda: sorted(self.index.export_rows("revoked_tokens")))
        return _answer({"revoked": [{"id": i, "revoked_at": at} for i, at in rows]})

    async def revoke(self, request: Request) -> Response:
        body = await self._body(request)
        if isinstance(body.get("token"), str):
            try:
                token_id = self.app.signer.claims_of(body["token"].strip()).id
            except RequestRefused:  # a 401 here would read as "the admin token is wrong"
                raise RequestRefused(422, '"token" is not a token this server signed: give it whole, or its "id"') from None
        else:
            token_id = _field(body, "id")
            if not token_id.isalnum() or len(token_id) > 64:
                raise RequestRefused(422, 'give "token" (a user token) or "id" (its id, as `git xet token` prints it)')
        await in_worker(self.index.revoke_token, token_id, int(time.time()))
        return _answer({"id": token_id})


def admin_api_routes(app: ServerState) -> list[Route]:
    api = AdminApi(app)
    return [
        Route("/admin/api/usage", api.usage),
        Route("/admin/api/repos/delete", api.delete, methods=["POST"]),
        Route("/admin/api/repos/prune", api.prune, methods=["POST"]),
        Route("/admin/api/repos/restore", api.restore, methods=["POST"]),
        Route("/admin/api/quotas", api.quotas),
        Route("/admin/api/repos/quota", api.set_quota, methods=["POST"]),
        Route("/admin/api/locks", api.locks),
        Route("/admin/api/locks/unlock", api.unlock, methods=["POST"]),
        Route("/admin/api/tokens", api.tokens),
        Route("/admin/api/tokens/revoke", api.revoke, methods=["POST"]),
    ]
