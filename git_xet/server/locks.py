"""The Git LFS file locking API (git-lfs's docs/api/locking.md), beside each repo's batch API:

    POST /{repo}.git/info/lfs/locks                 take a lock on a path (write)     201 / 409
    GET  /{repo}.git/info/lfs/locks?path=&id=&refspec=&cursor=&limit=   list (read)   200
    POST /{repo}.git/info/lfs/locks/verify          ours / theirs, before a push (write)
    POST /{repo}.git/info/lfs/locks/{id}/unlock     release: own lock, or {"force": true} (admin)

git-lfs asks /locks/verify before every push (with `lfs.<url>.locksverify true`) and refuses to
push a change to a path locked by another user; `lockable` files stay read-only until locked.

A lock belongs to a repository and a path (one lock per path: the index's unique key decides
between concurrent takers, on any replica) and to the token's user (Claims.owner). The ref
git-lfs names when locking is recorded and shown; `refspec` in a list matches the locks taken on
that ref and those taken without one. Verification covers every lock of the repo, whatever the
pushed ref: the lock is on the path, and the push would change it. Credentials as for the batch
API: the user token as Bearer or as the Basic-auth password.
"""

from __future__ import annotations

import json
import time
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.http_headers import LFS_MEDIA_TYPE
from ..storage.index_base import LockRecord
from .auth import Claims, presented_token
from .errors import RequestRefused, lfs_error_response
from .hub import STANDALONE_REPO_ALIAS, HubHost
from .worker_threads import in_worker

MAX_LOCK_BODY = 16 * 1024
MAX_PATH = 4096
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


def lock_json(lock: LockRecord) -> dict:
    """A lock as git-lfs reads it (`locked_at`: RFC 3339, UTC, second precision)."""
    out: dict = {
        "id": lock.id,
        "path": lock.path,
        "locked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(lock.locked_at)),
        "owner": {"name": lock.owner},
    }
    if lock.ref:
        out["ref"] = {"name": lock.ref}
    return out


def _answer(body: dict, status: int = 200) -> Response:
    return JSONResponse(body, status_code=status, media_type=LFS_MEDIA_TYPE, headers={"Cache-Control": "no-store"})


def _json_object(body: bytes) -> dict:
    """The request body as a JSON object (an empty body is {}); RequestRefused 422 otherwise."""
    if not body.strip():
        return {}
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise RequestRefused(422, "the body is not JSON") from None
    if not isinstance(value, dict):
        raise RequestRefused(422, "the body is not a JSON object")
    return value


def _ref_name(value: object) -> str | None:
    """The name of a request's `ref` ({"name": "refs/heads/main"}), if any."""
    if value is None:
        return None
    name = value.get("name") if isinstance(value, dict) else None
    if not isinstance(name, str) or len(name) > MAX_PATH or "\x00" in name:
        raise RequestRefused(422, 'ref must be {"name": "refs/heads/BRANCH"}')
    return name or None


def _limit(value: object) -> int:
    """A page size within this server's bounds (1..MAX_LIMIT; absent or 0: DEFAULT_LIMIT)."""
    if value in (None, "", 0):
        return DEFAULT_LIMIT
    try:
        limit = int(value) if not isinstance(value, bool) and isinstance(value, (int, str)) else -1
    except ValueError:
        limit = -1
    if limit < 0:
        raise RequestRefused(422, "limit must be a whole number")
    return max(1, min(limit, MAX_LIMIT))


def _cursor(value: object) -> str | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str) or len(value) > MAX_PATH:
        raise RequestRefused(422, "cursor must be the next_cursor of a previous answer")
    return value


class LockApi:
    def __init__(self, cas: HubHost) -> None:
        self.cas = cas

    async def _user(self, request: Request, needed: str) -> tuple[Claims, str]:
        """The user token's claims and the repo of the route it may act on for `needed`."""
        path_repo = request.path_params["repo"].removesuffix(".git").strip("/")
        repo = None if path_repo == STANDALONE_REPO_ALIAS else path_repo
        token = presented_token(request.headers.get("authorization", ""), basic=True) or ""
        claims = await self.cas.authorize(request, needed, token=token, kinds=("user",), repo=repo)
        return claims, claims.may(needed, repo)

    def _page(self, repo: str, limit: int, path: str | None, lock_id: str | None, ref: str | None, after: str | None) -> tuple[list[LockRecord], str | None]:
        """Up to `limit` locks and the cursor of the next page (None: this is the last)."""
        found = self.cas.store.index.find_locks(repo, path=path, lock_id=lock_id, ref=ref, after=after, limit=limit + 1)
        return found[:limit], (found[limit - 1].path if len(found) > limit else None)

    async def create(self, request: Request) -> Response:
        try:
            claims, repo = await self._user(request, "write")
            body = _json_object(await self.cas.read_body(request, MAX_LOCK_BODY))
            path, ref = body.get("path"), _ref_name(body.get("ref"))
            if not isinstance(path, str) or not path or len(path) > MAX_PATH or "\x00" in path:
                raise RequestRefused(422, f"path must be the file's path in the repository (1 to {MAX_PATH} characters)")
        except RequestRefused as exc:
            return lfs_error_response(exc.status, exc.message)
        wanted = LockRecord(str(uuid.uuid4()), repo, path, claims.owner, ref, int(time.time()))
        lock, created = await in_worker(self.cas.store.index.create_lock, wanted)
        if not created:
            return _answer({"lock": lock_json(lock), "message": f"already created lock: {path} is locked by {lock.owner}"}, 409)
        return _answer({"lock": lock_json(lock)}, 201)

    async def list(self, request: Request) -> Response:
        query = request.query_params
        try:
            _claims, repo = await self._user(request, "read")
            limit, after, ref = _limit(query.get("limit")), _cursor(query.get("cursor")), query.get("refspec") or None
        except RequestRefused as exc:
            return lfs_error_response(exc.status, exc.message)
        locks, cursor = await in_worker(self._page, repo, limit, query.get("path") or None, query.get("id") or None, ref, after)
        return _answer({"locks": [lock_json(lock) for lock in locks], **({"next_cursor": cursor} if cursor else {})})

    async def verify(self, request: Request) -> Response:
        try:
            claims, repo = await self._user(request, "write")
            body = _json_object(await self.cas.read_body(request, MAX_LOCK_BODY))
            _ref_name(body.get("ref"))
            limit, after = _limit(body.get("limit")), _cursor(body.get("cursor"))
        except RequestRefused as exc:
            return lfs_error_response(exc.status, exc.message)
        locks, cursor = await in_worker(self._page, repo, limit, None, None, None, after)
        ours = [lock_json(lock) for lock in locks if lock.owner == claims.owner]
        theirs = [lock_json(lock) for lock in locks if lock.owner != claims.owner]
        return _answer({"ours": ours, "theirs": theirs, **({"next_cursor": cursor} if cursor else {})})

    async def unlock(self, request: Request) -> Response:
        try:
            claims, repo = await self._user(request, "write")
            body = _json_object(await self.cas.read_body(request, MAX_LOCK_BODY))
            _ref_name(body.get("ref"))
        except RequestRefused as exc:
            return lfs_error_response(exc.status, exc.message)
        force = body.get("force") is True
        forced = force and claims.allows("admin")  # a non-admin's force still releases their own locks only
        lock, deleted = await in_worker(self.cas.store.index.delete_lock, repo, request.path_params["id"], None if forced else claims.owner)
        if lock is None:
            return lfs_error_response(404, "no such lock in this repository")
        if not deleted and force:
            return lfs_error_response(403, f"{lock.path} is locked by {lock.owner}; only an admin token (`git xet token --scope admin`) may force its unlock")
        if not deleted:
            return lfs_error_response(403, f"{lock.path} is locked by {lock.owner}; they can unlock it, or an admin with `git lfs unlock --force`")
        return _answer({"lock": lock_json(lock)})


def lock_routes(api: LockApi) -> list[Route]:
    return [
        Route("/{repo:path}/info/lfs/locks", api.create, methods=["POST"]),
        Route("/{repo:path}/info/lfs/locks", api.list, methods=["GET"]),
        Route("/{repo:path}/info/lfs/locks/verify", api.verify, methods=["POST"]),
        Route("/{repo:path}/info/lfs/locks/{id}/unlock", api.unlock, methods=["POST"]),
    ]
