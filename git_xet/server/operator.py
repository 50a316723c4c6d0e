"""The operator's routes: /health and /ready for load balancers, and behind the admin token /metrics
(Prometheus), /admin (the admin page, admin_page.py: figures, locks with a forced unlock, token
revocation) and /admin/api/summary (its figures as JSON).

The admin token is $GIT_XET_ADMIN_TOKEN (at least 16 bytes; give every replica the same one).
Without it /metrics and /admin are refused: nothing about the store is open to strangers. A
script presents it as `Authorization: Bearer TOKEN`; a browser signs in once with a form and
then holds a cookie derived from it (HttpOnly, SameSite=Strict), and each form the page posts
carries a value derived from it too, so another site cannot make the browser post one.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import os
import time
from pathlib import Path
from urllib.parse import parse_qs, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from ..storage.history import History
from ..storage.index_base import LockRecord
from ..storage.usage import repo_usage
from . import admin_page, metrics
from .auth import presented_token
from .errors import RequestRefused
from .state import ServerState
from .worker_threads import in_worker

ADMIN_TOKEN_ENV = "GIT_XET_ADMIN_TOKEN"
MIN_ADMIN_TOKEN = 16
COOKIE = "git_xet_admin"
READY_TIMEOUT = 5.0
MAX_FORM = 4096
MAX_LOCKS_SHOWN = 500


def admin_token() -> bytes | None:
    """The configured admin token, or None (admin routes off). ValueError if too short."""
    value = os.environ.get(ADMIN_TOKEN_ENV, "").strip().encode()
    if not value:
        return None
    if len(value) < MIN_ADMIN_TOKEN:
        raise ValueError(f"${ADMIN_TOKEN_ENV} must be at least {MIN_ADMIN_TOKEN} bytes: make one with `openssl rand -hex 32`")
    return value


class Operator:
    """Handlers of the operator's routes for one ServerState."""

    def __init__(self, app: ServerState, history: History) -> None:
        self.app = app
        self.history = history
        self.token = admin_token()
        self.store_figures = metrics.StoreCollector(history)

    def _derived(self, purpose: str) -> str:
        assert self.token is not None
        return hmac.new(self.token, purpose.encode(), hashlib.sha256).hexdigest()

    def _signed_in(self, request: Request) -> bool:
        if self.token is None:
            raise RequestRefused(403, f"admin routes are off: start the server with ${ADMIN_TOKEN_ENV} set (see docs/operations.md)")
        bearer = presented_token(request.headers.get("authorization", ""))
        if bearer is not None:
            return hmac.compare_digest(bearer.encode(), self.token)
        return hmac.compare_digest(request.cookies.get(COOKIE, ""), self._derived("session"))

    def _require(self, request: Request) -> None:
        if not self._signed_in(request):
            raise RequestRefused(401, "this route needs the server's admin token")

    # ------------------------------------------------------------------ readiness, metrics

    async def health(self, request: Request) -> Response:
        """Alive: answers without touching the store (/ready checks the index)."""
        return JSONResponse({"status": "ok"})

    async def ready(self, request: Request) -> Response:
        """200 when the index and the object store both answer, else 503 naming which fails."""
        failing = []
        for part, check in (("index", self.history.ping), ("objects", self._check_objects)):
            try:
                await asyncio.wait_for(in_worker(check), READY_TIMEOUT)
            except Exception:  # noqa: BLE001 - any failure (or timeout) means not ready
                failing.append(part)
        if failing:
            return JSONResponse({"status": "unavailable", "failing": failing}, status_code=503, headers={"Cache-Control": "no-store"})
        return JSONResponse({"status": "ready"}, headers={"Cache-Control": "no-store"})

    def _check_objects(self) -> None:
        bucket = self.app.object_bucket
        if bucket is not None:
            bucket.check()
            return
        root = Path(self.app.config.data_dir)
        for directory in (root, root / "xorbs"):
            if directory.exists() or directory == root:
                with os.scandir(directory) as entries:
                    next(entries, None)

    async def metrics(self, request: Request) -> Response:
        self._require(request)
        body, content_type = await in_worker(metrics.exposition, self.store_figures)
        return Response(body, media_type=content_type, headers={"Cache-Control": "no-store"})

    # ------------------------------------------------------------------ admin page and API

    def summary(self) -> dict:
        """What the admin page shows, as JSON (blocking: run in a worker thread)."""
        totals = self.history.totals()
        return {
            "totals": {**totals._asdict(), "dedup_saved_bytes": totals.dedup_saved_bytes},
            "repos": [usage.as_json() for usage in repo_usage(self.app.store.index)],
            "pushes": [push._asdict() for push in self.history.recent_pushes()],
            "samples": [sample._asdict() for sample in self.history.samples(time.time() - 30 * 24 * 3600)],
            "revoked_tokens": sorted(self.app.store.revoked_token_ids()),
            "locks": [lock._asdict() for lock in itertools.islice(map(LockRecord._make, self.app.store.index.export_rows("locks")), MAX_LOCKS_SHOWN)],
            "quotas": self.app.store.index.quotas(),
        }

    async def api_summary(self, request: Request) -> Response:
        self._require(request)
        return JSONResponse(await in_worker(self.summary), headers={"Cache-Control": "no-store"})

    async def page(self, request: Request) -> Response:
        if not self._signed_in(request):
            return HTMLResponse(admin_page.sign_in(), status_code=401, headers={"Cache-Control": "no-store"})
        summary = await in_worker(self.summary)
        return HTMLResponse(admin_page.render(summary, self._derived("csrf"), request.query_params.get("done", "")), headers={"Cache-Control": "no-store"})

    async def _form(self, request: Request) -> dict[str, str]:
        body = await self.app.read_body(request, MAX_FORM)
        return {k: v[0] for k, v in parse_qs(bytes(body).decode("utf-8", "replace")).items()}

    async def sign_in(self, request: Request) -> Response:
        if self.token is None:
            self._require(request)
        form = await self._form(request)
        if not hmac.compare_digest(form.get("token", "").strip().encode(), self.token or b""):
            return HTMLResponse(admin_page.sign_in("that is not the admin token"), status_code=401, headers={"Cache-Control": "no-store"})
        response = RedirectResponse("/admin", status_code=303)
        response.set_cookie(COOKIE, self._derived("session"), httponly=True, samesite="strict", secure=request.url.scheme == "https", path="/admin")
        return response

    async def _page_form(self, request: Request) -> dict[str, str]:
        """A form the admin page posted: signed in, and carrying the page's value (not another site's)."""
        self._require(request)
        form = await self._form(request)
        if not hmac.compare_digest(form.get("csrf", ""), self._derived("csrf")):
            raise RequestRefused(403, "this form did not come from the admin page: reload it and try again")
        return form

    async def unlock(self, request: Request) -> Response:
        """Release a Git LFS lock whoever holds it (`git lfs unlock --force` as its admin)."""
        form = await self._page_form(request)
        repo, lock_id = form.get("repo", ""), form.get("id", "")
        lock, deleted = await in_worker(self.app.store.index.delete_lock, repo, lock_id, None)
        if lock is None or not deleted:
            raise RequestRefused(404, f"repository {repo} has no lock {lock_id}: reload the page")
        return RedirectResponse("/admin?" + urlencode({"done": f"unlocked {lock.path} in {repo}"}), status_code=303)

    async def revoke(self, request: Request) -> Response:
        """Put a user token (given whole, or by its id) on the revocation list."""
        form = await self._page_form(request)
        given = form.get("token", "").strip()
        if given.count(".") == 2:
            token_id = self.app.signer.claims_of(given).id
        elif given and given.isalnum() and len(given) <= 64:
            token_id = given
        else:
            raise RequestRefused(400, "give a user token, or its id (what `git xet token` prints to stderr)")
        await in_worker(self.app.store.index.revoke_token, token_id, int(time.time()))
        return RedirectResponse(f"/admin?done=revoked+{token_id}", status_code=303)


def operator_routes(operator: Operator) -> list[Route]:
    return [
        Route("/health", operator.health),
        Route("/ready", operator.ready),
        Route("/metrics", operator.metrics),
        Route("/admin", operator.page),
        Route("/admin/sign-in", operator.sign_in, methods=["POST"]),
        Route("/admin/revoke", operator.revoke, methods=["POST"]),
        Route("/admin/unlock", operator.unlock, methods=["POST"]),
        Route("/admin/api/summary", operator.api_summary),
    ]
