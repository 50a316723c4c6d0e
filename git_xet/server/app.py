"""The CAS server's HTTP API (Starlette), with paths exactly as hf-xet calls them.

Routes (each also under /api/v1 as the draft spells them where it names one):
    GET  /health
    GET  /v1/reconstructions/{file}, /v2/reconstructions/{file}     (read)
    GET  /v1/xorb-data/{xorb}?r=a-b&exp=..&sig=..                   (signed URL, no token)
    GET  /v1/lfs-objects/{oid}                                       (read) a repo's LFS object, whole
                                                                     (ours: our agent's small downloads)
    POST /v1/xorbs/{prefix}/{xorb}                                   (write)
    POST /v1/xorb-grants/{prefix}/{xorb}, PUT /v1/xorb-uploads/{xorb}?<signed>,
    POST /v1/xorb-commits/{prefix}/{xorb}/grant/{id}                 upload grants (see grants.py)
    POST /v1/shards  -> {"result": 0|1};  POST /v2/shards -> NDJSON  (write)
    POST /v1/xorbs-and-shard -> {"result": 0|1}                      (write) ours: a shard and its small
                                                                     xorbs in one body (core/upload_bundle.py)
    GET  /v1/chunks/{prefix}/{chunk}                                 (read) global dedup shard
    POST /v1/telemetry                                               accepted and ignored
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlencode

from starlette.applications import Starlette

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core import hashes
from ..core.errors import FormatError
from ..core.http_headers import FILE_HASH, REFUSED_SHA256, UPLOAD_STREAM
from ..core.shard import Shard, ShardFooter, parse_shard, serialize_shard
from ..core.upload_bundle import parse_bundle
from ..core.xorb import VerifiedXorb
from ..storage.cas_store import CasStore, Sha256Prefix, StoredFile, chunks_referenced
from ..storage.history import History, open_history
from ..storage.index_factory import open_index
from ..storage.planning import plan_reconstruction
from ..storage.s3 import open_s3_objects
from .auth import KINDS, Claims, Signer, load_secret, presented_token
from .errors import RangeNotSatisfiable, RequestRefused, error_frame, exception_handlers, refusal
from .grants import GrantMode, Grants
from .http_io import DEFAULT_IDLE_TIMEOUT, FileRangeResponse, PacedStreamingResponse, read_body
from .http_guard import BODY_INTO, SEND_FILE, BodySink
from .hub import HubEmulation, hub_routes
from .locks import LockApi, lock_routes
from .reconstruction import parse_range_header, with_signed_urls
from .upload_streams import StreamRef, UploadStreams, parse_header, stream_ref
from .xorb_intake import MAX_XORB_BODY, ReceiveBuffers, ReceivedXorb, receive_xorb
from .worker_threads import in_worker, in_worker_holding

log = logging.getLogger("git_xet.server")

T = TypeVar("T")

DEDUP_KEY_PERIOD = 24 * 3600
DEDUP_SHARD_LIFETIME = 7 * 24 * 3600
MAX_SHARD_BODY = 64 * 1024 * 1024
# An upload bundle carries at most MAX_BUNDLE_XORBS xorbs that our client posts directly
# (under 1 MiB each) and the shard of a few small files.
MAX_BUNDLE_BODY = 32 * 1024 * 1024


# Shard validations (sha256 of whole files) running at once; the others wait their turn.
MAX_CONCURRENT_VALIDATIONS = 2
# Except small ones: a shard of at most this many bytes referencing at most this many chunks
# (8 MiB of sha256 at the 128 KiB largest chunk) costs less than its wait. Eight agents pushing
# many small files send one such shard per file; two at a time, each queued behind the other's
# fsyncs, they were most of such a push. Both bounds are structural: no claim in the shard
# (sizes, lengths) can make a big validation pass for a small one.
SMALL_SHARD_BYTES = 64 * 1024
SMALL_SHARD_CHUNKS = 64
REVOCATION_CACHE_SECONDS = 1.0
# A presigned bucket URL is served by the store, which knows nothing of revoked tokens: it lives
# at most this long, so revoking a token stops its bucket URLs within this time (our own URLs
# check the revocation list on each request).
BUCKET_URL_MAX_TTL = 600


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    # Base URL of xorb and download URLs. Without it, each request's Host header decides where
    # clients are sent: fine on loopback, and `serve` requires it on any other address.
    public_url: str | None = None
    url_ttl: int = 3600
    cas_token_ttl: int = 900  # CAS tokens handed out by the Hub emulation (the Hub uses ~15 min)
    upload_grants: GrantMode = "auto"  # whether to offer hf-xet's upload-grant flow: see offers_grants
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    # A shared index (postgresql://...) that replicas of this server use together; None: SQLite in data_dir.
    index_url: str | None = None
    secret_file: Path | None = None  # where the signing secret is, unless $GIT_XET_SERVER_SECRET
    objects: str | None = None  # s3://BUCKET[/PREFIX] for object bytes; None: files in data_dir

    @property
    def offers_grants(self) -> bool:
        """A grant lets a xorb's bytes bypass this server: a presigned PUT straight to the
        bucket. With objects in the data directory the grant's PUT comes back here, and each
        xorb costs two more requests and a CRC-64 on each side than a POST to /v1/xorbs, for
        nothing; "auto" offers grants only with a bucket. "always" offers them anyway (hf-xet's
        grant flow end to end against a directory), "never" not even with a bucket."""
        return self.upload_grants == "always" or (self.upload_grants == "auto" and self.objects is not None)


def _hash_param(request: Request, name: str) -> str:
    value = request.path_params[name]
    if not hashes.is_hash_hex(value):
        raise RequestRefused(400, f"invalid {name} hash")
    return value.lower()


class CasApp:
    """Request handlers bound to one store and signer."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.object_bucket = open_s3_objects(config.objects) if config.objects else None
        self.store = CasStore(config.data_dir, objects=self.object_bucket, private=True, index=open_index(config.index_url, config.data_dir, read_only=not os.access(config.data_dir, os.W_OK)))
        self.signer = Signer(load_secret(config.data_dir, config.secret_file, shared=config.index_url is not None))
        self._revoked: frozenset[str] = frozenset()
        self._revoked_at = float("-inf")
        self._validations: asyncio.Semaphore | None = None
        self._running = 0  # validations in a turn, running now (_counted)
        self._running_lock = threading.Lock()
        self.receive_buffers = ReceiveBuffers()
        self.upload_streams = UploadStreams(self.store.xorb_pieces)
        self.history: History = open_history(config.index_url, config.data_dir, writable=not self.store.read_only)

    async def revoked(self) -> frozenset[str]:
        """Revoked token ids, re-read from the index at most once a second (`git xet token
        --revoke` writes them there, from another process)."""
        if time.monotonic() - self._revoked_at > REVOCATION_CACHE_SECONDS:
            self._revoked = await in_worker(self.store.revoked_token_ids)
            self._revoked_at = time.monotonic()
        return self._revoked

    async def authorize(self, request: Request, needed: str, token: str | None = None, kinds=KINDS, repo: str | None = None) -> Claims:
        """The claims of the request's bearer token (or `token`), checked from headers alone, for
        `repo` (None: the one repo the token names, which the CAS routes act on as claims.repo)."""
        claims = self.signer.verify(token if token is not None else presented_token(request.headers.get("authorization", "")), needed, await self.revoked(), kinds)
        claims.may(needed, repo)
        return claims

    def validations(self) -> asyncio.Semaphore:
        if self._validations is None:
            self._validations = asyncio.Semaphore(MAX_CONCURRENT_VALIDATIONS)
        return self._validations

    def validated(self, small: Shard | None, fn: Callable[..., T], *args: object) -> Awaitable[T]:
        """fn(*args), a shard's validation, in a worker thread: in a turn unless the shard is
        small (`small`: what _parsed_if_small gave, see SMALL_SHARD_*). The turn is kept until
        the validation ends, even if its client has gone (issue 42 §8)."""
        if small is not None:
            return in_worker(fn, *args)
        return in_worker_holding(self.validations(), self._counted, fn, *args)

    def _counted(self, fn: Callable[..., T], *args: object) -> T:
        """fn(*args), logging how many turn-taking validations run at once as one starts and
        ends (what tests/integration/test_validation_turns.py watches, and an operator may)."""
        with self._running_lock:
            self._running += 1
            running = self._running
        log.info("shard validations running: %d", running)
        try:
            return fn(*args)
        finally:
            with self._running_lock:
                self._running -= 1
                running = self._running
            log.info("shard validation ended, %d still running", running)

    def read_body(self, request: Request, limit: int):
        """The request's body (see http_io.read_body), with this server's idle timeout."""
        return read_body(request, limit, self.config.idle_timeout)

    def receive_xorb(self, request: Request, limit: int = MAX_XORB_BODY, crc: bool = False) -> AbstractAsyncContextManager[ReceivedXorb]:
        """The request's body as a xorb verified while it arrives (see xorb_intake.receive_xorb)."""
        return receive_xorb(request, self.receive_buffers, limit, self.config.idle_timeout, crc)

    @staticmethod
    def upload_stream(request: Request, claims: Claims) -> StreamRef | None:
        """The request's X-Xet-Upload-Stream, if any (see upload_streams: our client's;
        malformed ones are ignored, as unknown headers are)."""
        parsed = parse_header(request.headers.get(UPLOAD_STREAM))
        if parsed is None:
            return None
        stream_id, seq = parsed
        return stream_ref(claims.id, claims.repo, stream_id, seq)

    def stored_in_stream(self, stream: StreamRef | None, xorb: str, held: VerifiedXorb | None = None) -> None:
        """A request newly stored `xorb` (`held`: as verified, still in its buffer): hash it
        into its stream, if it names one."""
        if stream is not None and stream.seq is not None:
            xorb_hash = hashes.hex_to_hash(xorb)
            content = self.store.xorb_pieces(xorb_hash, held) if held is not None else None
            self.upload_streams.stored(stream, xorb_hash, content)

    def store_received_xorb(self, xorb: str, received: ReceivedXorb, stream: StreamRef | None = None) -> bool:
        """Store a received xorb (in a worker thread, inside its receive_xorb block), and hash
        it into its upload stream if this stored it (while its buffer is still ours)."""
        verified: list[VerifiedXorb] = []

        def verify(expected: bytes) -> VerifiedXorb:
            verified.append(received.verifier.finish(received.length, expected))
            return verified[0]

        inserted = self.store.put_verified_xorb(xorb, verify)
        if inserted:
            self.stored_in_stream(stream, xorb, verified[0])
        return inserted

    hash_param = staticmethod(_hash_param)

    def base_url(self, request: Request) -> str:
        """Where clients reach us: --public-url, else the request's own base URL."""
        return (self.config.public_url or str(request.base_url)).rstrip("/")

    # ------------------------------------------------------------------ handlers

    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def url_expiry(self, claims: Claims, now: float, unrevocable: bool = False) -> int:
        """When a URL handed out on `claims` stops working: after --url-ttl, never after the
        token itself, and, for a URL the store serves without asking us (`unrevocable`: a
        presigned bucket URL, which no revocation list reaches), within BUCKET_URL_MAX_TTL, so
        that revoking the token stops its URLs by then. Clients query the reconstruction again
        when a URL expires."""
        ttl = min(self.config.url_ttl, BUCKET_URL_MAX_TTL) if unrevocable else self.config.url_ttl
        return min(int(now) + ttl, claims.exp)

    def _plan(self, claims: Claims, file_hex: str, range_header: str | None, base: str, version: int) -> tuple[StoredFile, dict | None]:
        """Blocking part of a reconstruction (SQLite, planning, signing thousands of URLs for a
        big file): run in a worker thread. The plan's JSON, or None for a range past the end.
        Each URL grants exactly one planned byte range of one xorb, no longer than `claims` may
        read (see url_expiry)."""
        stored = self.store.get_file(file_hex) if self.store.repo_has_file(claims.repo, file_hex) else None
        if stored is None:  # the same answer whether the file is elsewhere or nowhere
            raise RequestRefused(404, f"file {file_hex} not found")
        try:
            byte_range = parse_range_header(range_header, stored.size)
        except RangeNotSatisfiable:
            return stored, None
        except ValueError as exc:
            raise RequestRefused(400, str(exc)) from None
        plan = plan_reconstruction(stored.terms, self.store.layouts_for(stored), byte_range)
        now = time.time()
        bucket = self.object_bucket
        if bucket is not None:
            ttl = self.url_expiry(claims, now, unrevocable=True) - int(now)

            def make_url(xorb: str, start: int, end: int) -> str:
                return bucket.presign_range(CasStore.xorb_key(xorb), start, end, ttl)

        else:
            exp = self.url_expiry(claims, now)

            def make_url(xorb: str, start: int, end: int) -> str:
                sig = self.signer.sign_range(xorb, start, end, exp, claims.id)
                return f"{base}/v1/xorb-data/{xorb}?{urlencode({'r': f'{start}-{end}', 'exp': exp, 't': claims.id, 'sig': sig})}"

        return stored, with_signed_urls(plan, make_url).to_json(version)

    async def reconstruction(self, request: Request) -> Response:
        claims = await self.authorize(request, "read")
        file_hex = _hash_param(request, "file")
        version = 2 if request.url.path.startswith("/v2/") else 1
        args = (claims, file_hex, request.headers.get("range"), self.base_url(request), version)
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

    async def lfs_object(self, request: Request) -> Response:
        """A Git LFS object of the caller's repo, whole, by its oid (sha256): one round trip
        where our agent would otherwise make three for a small file (oid -> file hash, the
        reconstruction, the xorb range). Served as the bridge serves `basic` downloads: each
        chunk checked against its stored hash as it is read, paced, any size; the agent asks
        only for small files and checks the sha256 itself."""
        claims = await self.authorize(request, "read")
        oid = request.path_params["oid"].lower()
        if not hashes.is_hash_hex(oid):
            raise RequestRefused(400, "an LFS oid is 64 hex digits (the object's sha256)")
        stored = await in_worker(self.store.file_by_sha256, oid, claims.repo)
        if stored is None:
            raise RequestRefused(404, f"object {oid} not found")
        return self.whole_file(stored, {FILE_HASH: stored.file_hex, "Cache-Control": "private, no-store"})

    def whole_file(self, stored: StoredFile, headers: dict[str, str] | None = None) -> Response:
        """A stored file's bytes as one paced response, each chunk checked as it is read."""
        return PacedStreamingResponse(
            self.store.iter_file_bytes(stored),
            self.config.idle_timeout,
            media_type="application/octet-stream",
            headers={"Content-Length": str(stored.size), **(headers or {})},
        )

    async def xorb_data(self, request: Request) -> Response:
        """A signed xorb URL: a capability issued by a reconstruction its repo was allowed to make."""
        xorb = _hash_param(request, "xorb")
        try:
            start_s, _, end_s = request.query_params["r"].partition("-")
            start, end, exp = int(start_s), int(end_s), int(request.query_params["exp"])
            sig, token_id = request.query_params["sig"], request.query_params["t"]
        except (KeyError, ValueError):
            raise RequestRefused(403, "not a signed xorb URL") from None
        self.signer.check_range(xorb, start, end, exp, sig, token_id)
        if token_id in await self.revoked():
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
            self.config.idle_timeout,
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
        return FileRangeResponse(file, start, end - start + 1, self.config.idle_timeout, streamed)

    async def upload_xorb(self, request: Request) -> Response:
        claims = await self.authorize(request, "write")
        xorb = _hash_param(request, "xorb")
        async with self.receive_xorb(request) as received:
            inserted = await in_worker(self.store_received_xorb, xorb, received, self.upload_stream(request, claims))
        return JSONResponse({"was_inserted": inserted})

    def _stream_prefix(self, stream: StreamRef | None) -> Sha256Prefix | None:
        """What the shard's upload stream hashed (waits for it: call in a worker thread)."""
        return None if stream is None else self.upload_streams.prefix(stream)

    def _register(self, body: bytes, repo: str, refused: list[str], progress=None, parsed: Shard | None = None, stream: StreamRef | None = None) -> bool:
        """Register a shard; files whose sha256 claim is wrong go into `refused` (see shard_result)."""
        prefix = self._stream_prefix(stream)
        inserted = self.store.register_shard(body, repo, verify_sha256=True, progress=progress, parsed=parsed, prefix=prefix, refused=refused)
        if inserted:
            self.record_push(repo, parsed if parsed is not None else parse_shard(body))
        return inserted

    def record_push(self, repo: str, shard: Shard) -> None:
        """A shard a repo newly registered, in the history the admin page shows (best effort:
        the push has succeeded whether or not its row is written)."""
        try:
            self.history.record_push(repo, len(shard.files), sum(t.unpacked_bytes for f in shard.files for t in f.terms))
        except Exception as exc:  # noqa: BLE001 - any database failure: logged, never fails the push
            log.warning("could not record a push of %s in the history: %s", repo, type(exc).__name__)

    async def upload_shard_v1(self, request: Request) -> Response:
        claims = await self.authorize(request, "write")
        body = await self.read_body(request, MAX_SHARD_BODY)
        small = _parsed_if_small(body)
        refused: list[str] = []
        inserted = await self.validated(small, self._register, body, claims.repo, refused, None, small, self.upload_stream(request, claims))
        return JSONResponse(shard_result(inserted, refused))

    async def upload_bundle(self, request: Request) -> Response:
        """A shard and its small xorbs in one body (core/upload_bundle.py, our agent's small
        files): each xorb stored, verified, as POST /v1/xorbs does, then the shard registered
        as POST /v1/shards does; what was stored before a refusal stays, as with two requests."""
        claims = await self.authorize(request, "write")
        body = await self.read_body(request, MAX_BUNDLE_BODY)
        try:
            xorbs, shard = parse_bundle(body)
        except FormatError as exc:
            raise RequestRefused(400, f"invalid upload bundle: {exc}") from None
        shard_body = bytes(shard)
        small = _parsed_if_small(shard_body)
        refused: list[str] = []
        inserted = await self.validated(small, self._store_bundle, xorbs, shard_body, claims.repo, small, self.upload_stream(request, claims), refused)
        return JSONResponse(shard_result(inserted, refused))

    def _store_bundle(
        self, xorbs: list[tuple[hashes.XetHash, memoryview]], shard: bytes, repo: str, parsed: Shard | None, stream: StreamRef | None, refused: list[str]
    ) -> bool:
        """A bundle's xorbs, then its shard, in one worker turn: per small file, the thread
        hand-offs cost more than the work."""
        prefix = self._stream_prefix(stream)
        inserted = self.store.put_xorbs_with_shard([(hashes.hash_to_hex(h), xorb) for h, xorb in xorbs], shard, repo, verify_sha256=True, parsed=parsed, prefix=prefix, refused=refused)
        if inserted:
            self.record_push(repo, parsed if parsed is not None else parse_shard(shard))
        return inserted

    async def upload_shard_v2(self, request: Request) -> Response:
        """NDJSON frames: `validating` while the sha256 of the shard's files is computed from the
        stored bytes (the long part), then `committing` and the `result` or an `error`."""
        claims = await self.authorize(request, "write")
        body = await self.read_body(request, MAX_SHARD_BODY)

        def frame(obj: dict) -> bytes:
            return json.dumps(obj).encode() + b"\n"

        async def frames() -> AsyncIterator[bytes]:
            loop = asyncio.get_running_loop()
            updates: asyncio.Queue[tuple[int, int]] = asyncio.Queue()

            def progress(done: int, total: int) -> None:  # called from the worker thread
                loop.call_soon_threadsafe(updates.put_nowait, (done, total))

            yield frame({"type": "validating", "verified": 0, "total": 1})
            small = _parsed_if_small(body)
            wrong_claims: list[str] = []
            work = asyncio.ensure_future(self.validated(small, self._register, body, claims.repo, wrong_claims, progress, small, self.upload_stream(request, claims)))
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

        return PacedStreamingResponse(frames(), self.config.idle_timeout, media_type="application/x-ndjson")

    async def chunk_dedup(self, request: Request) -> Response:
        """Global dedup across repos: the answer's chunk hashes are keyed, so it only helps a
        client that already holds a chunk's bytes, and reveals no file of any repo."""
        await self.authorize(request, "read")
        if request.path_params["prefix"] not in ("default", "default-merkledb"):
            raise RequestRefused(404, "unknown dedup namespace")
        chunk = hashes.hex_to_hash(_hash_param(request, "chunk"))
        found = await in_worker(self.store.dedup_shard, chunk)
        if found is None:
            raise RequestRefused(404, "chunk not known")
        now = int(time.time())
        epoch = now // DEDUP_KEY_PERIOD
        key = self.signer.derive_key(f"dedup:{epoch}")
        keyed = found.with_keyed_chunk_hashes(key)
        footer = ShardFooter(chunk_hash_key=key, creation_timestamp=now, key_expiry=now + DEDUP_SHARD_LIFETIME)
        blob = serialize_shard(keyed._replace(footer=footer), with_footer=True)
        return Response(blob, media_type="application/octet-stream", headers={"Cache-Control": "private, max-age=3600", "Vary": "Authorization"})

    async def telemetry(self, request: Request) -> Response:
        return JSONResponse({})


def shard_result(inserted: bool, refused: list[str]) -> dict[str, object]:
    """A shard upload's answer: hf-xet's `result`, and the files (hashes) whose sha256 claim
    was wrong, registered without that oid (REFUSED_SHA256, when there are any): the other
    files of the shard stand, and a client that sent the claim learns that it was refused."""
    answer: dict[str, object] = {"result": 1 if inserted else 0}
    if refused:
        answer[REFUSED_SHA256] = sorted(set(refused))
    return answer


def _parsed_if_small(body: bytes) -> Shard | None:
    """The shard, parsed, if it is small enough to be validated without a turn (see
    SMALL_SHARD_*); its registration then uses this parse instead of making another. None for
    any other: one that does not parse is refused by its validation, in its turn."""
    if len(body) > SMALL_SHARD_BYTES:
        return None
    try:
        shard = parse_shard(body)
    except FormatError:
        return None
    return shard if chunks_referenced(shard) <= SMALL_SHARD_CHUNKS else None


def _routes(app: CasApp) -> list[Route]:
    grants = Grants(app)
    routes = [Route("/health", app.health)]
    for prefix in ("", "/api"):
        routes += [
            Route(prefix + "/v1/reconstructions/{file}", app.reconstruction),
            Route(prefix + "/v1/xorbs/{prefix}/{xorb}", app.upload_xorb, methods=["POST"]),
            Route(prefix + "/v1/shards", app.upload_shard_v1, methods=["POST"]),
            Route(prefix + "/v1/chunks/{prefix}/{chunk}", app.chunk_dedup),
        ]
    routes += [
        Route("/v2/reconstructions/{file}", app.reconstruction),
        Route("/v1/xorb-data/{xorb}", app.xorb_data),
        Route("/v1/lfs-objects/{oid}", app.lfs_object),
        Route("/v1/xorb-grants/{prefix}/{xorb}", grants.grant, methods=["POST"]),
        Route("/v1/xorb-uploads/{xorb}", grants.put, methods=["PUT"]),
        Route("/v1/xorb-commits/{prefix}/{xorb}/grant/{grant}", grants.commit, methods=["POST"]),
        Route("/v2/shards", app.upload_shard_v2, methods=["POST"]),
        Route("/v1/xorbs-and-shard", app.upload_bundle, methods=["POST"]),
        Route("/v1/telemetry", app.telemetry, methods=["POST"]),
    ]
    return routes


class _AccessLog:
    """ASGI middleware: one structured line per request; never the query string or headers;
    and the same figures to `observe` (the metrics), with the route's template."""

    def __init__(self, app, observe: Callable[[str, str, int, float, int, int], None]) -> None:
        self.app = app
        self.observe = observe

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        seen = {"status": 0, "bytes_in": 0, "bytes_out": 0}
        # A body taken into a sink (http_guard.BODY_INTO) passes through no message: count it
        # there. (Under our protocol a sink's request has no body in its messages.)
        sinks: list[BodySink] = []
        extensions = scope.get("extensions") or {}
        into = extensions.get(BODY_INTO)
        send_file = extensions.get(SEND_FILE)
        counted: dict[str, object] = {}  # the extensions we wrap, to count the bytes they carry
        if into is not None:

            def counted_into(buffer, limit: int) -> BodySink:
                sinks.append(into(buffer, limit))
                return sinks[-1]

            counted[BODY_INTO] = counted_into
        if send_file is not None:
            # Likewise a body sent from a file (http_guard.SEND_FILE).

            async def counted_send_file(*args) -> int:
                sent = await send_file(*args)
                seen["bytes_out"] += sent
                return sent

            counted[SEND_FILE] = counted_send_file
        if counted:
            scope = {**scope, "extensions": {**extensions, **counted}}

        async def receive_wrapper():
            message = await receive()
            if message["type"] == "http.request":
                seen["bytes_in"] += len(message.get("body", b""))
            return message

        logged = False

        def write_line() -> None:
            nonlocal logged
            if logged:
                return
            logged = True
            seconds = time.perf_counter() - start
            bytes_in = seen["bytes_in"] + sum(sink.received for sink in sinks)
            log.info(
                json.dumps(
                    {
                        "method": scope["method"],
                        "path": scope["path"],
                        "status": seen["status"],
                        "ms": round(1000 * seconds, 1),
                        "bytes_in": bytes_in,  # request and response body sizes
                        "bytes_out": seen["bytes_out"],
                        "client": (scope.get("client") or ["?"])[0],
                    }
                )
            )
            # The router leaves the matched route in the scope: its template bounds the labels.
            self.observe(getattr(scope.get("route"), "path", "unmatched"), scope["method"], seen["status"], seconds, bytes_in, seen["bytes_out"])

        async def send_wrapper(message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            elif message["type"] == "http.response.body":
                seen["bytes_out"] += len(message.get("body", b""))
                if not message.get("more_body", False):
                    # Logged before the answer's last bytes leave: whoever has read a whole
                    # answer (a test, an operator's script) finds its line in the log.
                    write_line()
            await send(message)

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        except BaseException:
            seen["status"] = seen["status"] or 500  # what the error middleware outside us sends
            raise
        finally:
            write_line()  # an answer cut short, or none at all


def create_app(config: ServerConfig) -> Starlette:
    # Imported here, not above: prometheus-client picks its multiprocess mode at import, after
    # `serve` has set its directory (see metrics.py).
    from . import metrics
    from .operator import Operator, operator_routes

    app = CasApp(config)
    hub = HubEmulation(app)

    starlette = Starlette(
        routes=_routes(app) + hub_routes(hub) + lock_routes(LockApi(app)) + operator_routes(Operator(app, app.history)),
        exception_handlers={kind: _counting_errors(handler, metrics.storage_error) for kind, handler in exception_handlers().items()},
    )
    starlette.router.redirect_slashes = False  # an API answers, it does not redirect
    starlette.state.cas = app
    starlette.add_middleware(_AccessLog, observe=metrics.observe_request)
    return starlette


def _counting_errors(handler, count: Callable[[BaseException], None]):
    """`handler`, counting each error it answers (the metrics' index and object-store errors)."""

    async def counted(request: Request, exc: Exception) -> Response:
        count(exc)
        return await handler(request, exc)

    return counted
