"""The XET CAS API, with paths exactly as hf-xet calls them (v1 reconstructions, xorbs, shards
and chunks also under /api, as the draft spells them):

    GET  /v1/reconstructions/{file}, /v2/reconstructions/{file}     (read)
    GET  /v1/xorb-data/{xorb}?r=a-b&exp=..&sig=..                   (signed URL, no token)
    POST /v1/xorbs/{prefix}/{xorb}                                   (write)
    POST /v1/shards  -> {"result": 0|1};  POST /v2/shards -> NDJSON  (write)
    GET  /v1/chunks/{prefix}/{chunk}                                 (read) global dedup shard
    POST /v1/telemetry                                               accepted and ignored

Upload grants (/v1/xorb-grants, ...) are in grants.py; our own extension in extension.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core import hashes
from ..core.reconstruction import Reconstruction
from ..core.shard import ShardFooter, serialize_shard
from ..core.xorb import XorbLayout
from ..storage.cas_store import CasStore, StoredFile
from ..storage.planning import plan_reconstruction
from .auth import Claims
from .errors import RangeNotSatisfiable, RequestRefused, error_frame, refusal
from .http_guard import SEND_FILE
from .http_io import FileRangeResponse, PacedStreamingResponse
from .http_ranges import parse_range_header
from .shard_intake import parsed_if_small, shard_result
from .state import ServerState, hash_param
from .worker_threads import in_worker

log = logging.getLogger("git_xet.server")

DEDUP_KEY_PERIOD = 24 * 3600
DEDUP_SHARD_LIFETIME = 7 * 24 * 3600
MAX_SHARD_BODY = 64 * 1024 * 1024


def with_signed_urls(plan: Reconstruction, make_url: Callable[[str, int, int], str]) -> Reconstruction:
    """The plan with each fetch range given its signed URL."""
    return plan._replace(fetches=tuple(f._replace(url=make_url(f.xorb, f.byte_start, f.byte_end)) for f in plan.fetches))


def wants_chunk_byte_sizes(query: Mapping[str, str]) -> bool:
    """`?chunk_byte_sizes=true`: the client (hf-xet's newer clients) wants each term's chunk sizes.
    Other query parameters are ignored, as before."""
    return query.get("chunk_byte_sizes", "").lower() in ("true", "1")


def with_chunk_byte_sizes(body: dict, plan: Reconstruction, layouts: Mapping[str, XorbLayout]) -> dict:
    """The reconstruction JSON with `chunk_byte_sizes` on every term: the decoded size of each
    chunk of the term's range, in order (xet-core's `XorbReconstructionTerm.chunk_byte_sizes`,
    a `Vec<u32>`), so a client can cut a later range read to whole chunks without asking again."""
    for term_json, term in zip(body["terms"], plan.terms, strict=True):
        term_json["chunk_byte_sizes"] = list(layouts[term.xorb].chunk_sizes[term.chunk_start : term.chunk_end])
    return body


class CasApi:
    """Handlers of the XET CAS API on one ServerState."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.store = state.store

    def _plan(self, claims: Claims, file_hex: str, range_header: str | None, base: str, version: int, sizes: bool = False) -> tuple[StoredFile, dict | None]:
        """Blocking part of a reconstruction (SQLite, planning, signing thousands of URLs for a
        big file): run in a worker thread. The plan's JSON, or None for a range past the end.
        Each URL grants exactly one planned byte range of one xorb, no longer than `claims` may
        read (see ServerState.url_expiry)."""
        stored = self.store.get_file(file_hex) if self.store.repo_has_file(claims.repo, file_hex) else None
        if stored is None:  # the same answer whether the file is elsewhere or nowhere
            raise RequestRefused(404, f"file {file_hex} not found")
        try:
            byte_range = parse_range_header(range_header, stored.size)
        except RangeNotSatisfiable:
            return stored, None
        except ValueError as exc:
            raise RequestRefused(400, str(exc)) from None
        layouts = self.store.layouts_for(stored)
        plan = plan_reconstruction(stored.terms, layouts, byte_range)
        now = time.time()
        bucket = self.state.object_bucket
        if bucket is not None:
            ttl = self.state.url_expiry(claims, now, unrevocable=True) - int(now)

            def make_url(xorb: str, start: int, end: int) -> str:
                return bucket.presign_range(CasStore.xorb_key(xorb), start, end, ttl)

        else:
            exp = self.state.url_expiry(claims, now)

            def make_url(xorb: str, start: int, end: int) -> str:
                sig = self.state.signer.sign_range(xorb, start, end, exp, claims.id)
                return f"{base}/v1/xorb-data/{xorb}?{urlencode({'r': f'{start}-{end}', 'exp': exp, 't': claims.id, 'sig': sig})}"

        body = with_signed_urls(plan, make_url).to_json(version)
        return stored, with_chunk_byte_sizes(body, plan, layouts) if sizes else body

    async def reconstruction(self, request: Request) -> Response:
        claims = await self.state.authorize(request, "read")
        file_hex = hash_param(request, "file")
        version = 2 if request.url.path.startswith("/v2/") else 1
        args = (claims, file_hex, request.headers.get("range"), self.state.base_url(request), version, wants_chunk_byte_sizes(request.query_params))
        stored, body = await in_worker(self._plan, *args)
        if body is None:
            return Response(status_code=416, headers={"Content-Range": f"bytes */{stored.size}"})
        return JSONResponse(body, headers={"Cache-Control": "private, no-store"})

    def iter_range(self, xorb: str, start: int, end: int):
        """Bytes [start, end] of a stored xorb in pieces of the object store's read_piece (read
        in a worker thread), so a slow reader holds at most one."""
        step = self.store.objects.read_piece
        pos = start
        while pos <= end:
            piece = self.store.read_xorb_range(xorb, pos, min(end, pos + step - 1))
            if not piece:
                return
            yield piece
            pos += len(piece)

    async def xorb_data(self, request: Request) -> Response:
        """A signed xorb URL: a capability issued by a reconstruction its repo was allowed to make."""
        xorb = hash_param(request, "xorb")
        try:
            start_s, _, end_s = request.query_params["r"].partition("-")
            start, end, exp = int(start_s), int(end_s), int(request.query_params["exp"])
            sig, token_id = request.query_params["sig"], request.query_params["t"]
        except (KeyError, ValueError):
            raise RequestRefused(403, "not a signed xorb URL") from None
        self.state.signer.check_range(xorb, start, end, exp, sig, token_id)
        if token_id in await self.state.revoked():
            raise RequestRefused(403, "the token this URL was issued to is revoked")
        if request.headers.get("range", "").replace(" ", "") != f"bytes={start}-{end}":
            raise RequestRefused(403, f"this URL serves exactly Range: bytes={start}-{end}")
        layout = await in_worker(self.store.xorb_layout, xorb)
        if layout is None:
            raise RequestRefused(404, f"xorb {xorb} not found")
        if end >= layout.byte_ends[-1]:
            raise RequestRefused(416, "range beyond the end of the xorb")
        ttl = max(0, exp - int(time.time()))
        streamed = PacedStreamingResponse(
            self.iter_range(xorb, start, end),
            self.state.config.idle_timeout,
            status_code=206,
            media_type="application/octet-stream",
            headers={
                "Content-Length": str(end - start + 1),
                "Content-Range": f"bytes {start}-{end}/*",
                "Cache-Control": f"public, immutable, max-age={ttl}",
                "ETag": f'"{xorb}"',
            },
        )
        if SEND_FILE not in request.scope.get("extensions", {}):
            return streamed
        file = await in_worker(self.store.open_xorb_file, xorb)
        if file is None:
            return streamed
        return FileRangeResponse(file, start, end - start + 1, self.state.config.idle_timeout, streamed)

    async def upload_xorb(self, request: Request) -> Response:
        claims = await self.state.authorize(request, "write")
        xorb = hash_param(request, "xorb")
        async with self.state.receive_xorb(request) as received:
            inserted = await in_worker(self.state.store_received_xorb, xorb, received, self.state.upload_stream(request, claims))
        return JSONResponse({"was_inserted": inserted})

    async def upload_shard_v1(self, request: Request) -> Response:
        claims = await self.state.authorize(request, "write")
        body = await self.state.read_body(request, MAX_SHARD_BODY)
        small = parsed_if_small(body)
        refused: list[str] = []
        inserted = await self.state.shards.validated(small, self.state.shards.register, body, claims.repo, refused, None, small, self.state.upload_stream(request, claims))
        return JSONResponse(shard_result(inserted, refused))

    async def upload_shard_v2(self, request: Request) -> Response:
        """NDJSON frames: `validating` while the sha256 of the shard's files is computed from the
        stored bytes (the long part), then `committing` and the `result` or an `error`."""
        claims = await self.state.authorize(request, "write")
        body = await self.state.read_body(request, MAX_SHARD_BODY)

        def frame(obj: dict) -> bytes:
            return json.dumps(obj).encode() + b"\n"

        async def frames() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            updates: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

            def progress(done: int, total: int) -> None:  # called from the worker thread
                loop.call_soon_threadsafe(updates.put_nowait, (done, total))

            yield frame({"type": "validating", "verified": 0, "total": 1})
            small = parsed_if_small(body)
            wrong_claims: list[str] = []
            work = asyncio.ensure_future(self.state.shards.validated(small, self.state.shards.register, body, claims.repo, wrong_claims, progress, small, self.state.upload_stream(request, claims)))
            try:
                while not work.done():
                    update = asyncio.ensure_future(updates.get())
                    await asyncio.wait({work, update}, return_when=asyncio.FIRST_COMPLETED)
                    if update.done():
                        done, total = update.result()
                        yield frame({"type": "validating", "verified": done, "total": total})
                    else:
                        update.cancel()
            finally:
                work.cancel()  # the client left: a validation not started yet never starts (a running one keeps its turn)
            try:
                inserted = work.result()
            except Exception as exc:  # reported in-band once the stream has started
                refused = refusal(exc)
                if refused is None:
                    log.exception("shard registration failed")
                elif refused.status >= 500:
                    log.error("shard registration failed: %s", exc)
                yield frame(error_frame(refused, "internal error registering the shard"))
                return
            yield frame({"type": "committing", "stage": "syncing"})
            yield frame({"type": "result", **shard_result(inserted, wrong_claims)})

        return PacedStreamingResponse(frames(), self.state.config.idle_timeout, media_type="application/x-ndjson")

    async def chunk_dedup(self, request: Request) -> Response:
        """Global dedup across repos: the answer's chunk hashes are keyed, so it only helps a
        client that already holds a chunk's bytes, and reveals no file of any repo."""
        await self.state.authorize(request, "read")
        if request.path_params["prefix"] not in ("default", "default-merkledb"):
            raise RequestRefused(404, "unknown dedup namespace")
        chunk = hashes.hex_to_hash(hash_param(request, "chunk"))
        found = await in_worker(self.store.dedup_shard, chunk)
        if found is None:
            raise RequestRefused(404, "chunk not known")
        now = int(time.time())
        epoch = now // DEDUP_KEY_PERIOD
        key = self.state.signer.derive_key(f"dedup:{epoch}")
        keyed = found.with_keyed_chunk_hashes(key)
        footer = ShardFooter(chunk_hash_key=key, creation_timestamp=now, key_expiry=now + DEDUP_SHARD_LIFETIME)
        blob = serialize_shard(keyed._replace(footer=footer), with_footer=True)
        return Response(blob, media_type="application/octet-stream", headers={"Cache-Control": "private, max-age=3600", "Vary": "Authorization"})

    async def telemetry(self, request: Request) -> Response:
        return JSONResponse({})



def cas_routes(api: CasApi) -> list[Route]:
    routes: list[Route] = []
    for prefix in ("", "/api"):
        routes += [
            Route(prefix + "/v1/reconstructions/{file}", api.reconstruction),
            Route(prefix + "/v1/xorbs/{prefix}/{xorb}", api.upload_xorb, methods=["POST"]),
            Route(prefix + "/v1/shards", api.upload_shard_v1, methods=["POST"]),
            Route(prefix + "/v1/chunks/{prefix}/{chunk}", api.chunk_dedup),
        ]
    routes += [
        Route("/v2/reconstructions/{file}", api.reconstruction),
        Route("/v1/xorb-data/{xorb}", api.xorb_data),
        Route("/v2/shards", api.upload_shard_v2, methods=["POST"]),
        Route("/v1/telemetry", api.telemetry, methods=["POST"]),
    ]
    return routes
