"""What every route module of the server shares: its configuration, and one ServerState per
process holding the store, the signer, token checks and the upload machinery.

The route modules take a ServerState (cas_api, extension, grants, operator import this module;
hub and locks name what they use by its shape, hub.HubHost). It imports none of them, so the
route modules and the assembly (app.py) form no import circle.
"""

from __future__ import annotations

import os
import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from starlette.requests import Request
from starlette.responses import Response

from ..core import hashes
from ..core.xorb import VerifiedXorb
from ..storage.cas_store import CasStore, StoredFile
from ..storage.history import History, open_history
from ..storage.index_factory import open_index
from ..storage.s3 import open_s3_objects
from .auth import KINDS, Claims, Signer, load_secret, presented_token
from .deprecated import upload_stream_header
from .errors import RequestRefused
from .http_io import DEFAULT_IDLE_TIMEOUT, PacedStreamingResponse, read_body
from .shard_intake import ShardIntake
from .upload_streams import StreamRef, UploadStreams, parse_header, stream_ref
from .worker_threads import in_worker
from .xorb_intake import MAX_XORB_BODY, ReceiveBuffers, ReceivedXorb, receive_xorb

GrantMode = Literal["auto", "always", "never"]  # when a server offers grants: ServerConfig.offers_grants

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


def hash_param(request: Request, name: str) -> str:
    """Path parameter `name`, a hash in hex (lower-cased); 400 for anything else."""
    value = request.path_params[name]
    if not hashes.is_hash_hex(value):
        raise RequestRefused(400, f"invalid {name} hash")
    return value.lower()


class ServerState:
    """One store and signer, and what the route modules do with them in common: check a
    request's token, read its body, take in a xorb, register a shard (`shards`)."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.object_bucket = open_s3_objects(config.objects) if config.objects else None
        self.store = CasStore(config.data_dir, objects=self.object_bucket, private=True, index=open_index(config.index_url, config.data_dir, read_only=not os.access(config.data_dir, os.W_OK)))
        self.signer = Signer(load_secret(config.data_dir, config.secret_file, shared=config.index_url is not None))
        self._revoked: frozenset[str] = frozenset()
        self._revoked_at = float("-inf")
        self.receive_buffers = ReceiveBuffers()
        self.upload_streams = UploadStreams(self.store.xorb_pieces)
        self.history: History = open_history(config.index_url, config.data_dir, writable=not self.store.read_only, index=self.store.index)
        self.shards = ShardIntake(self.store, self.history, self.upload_streams)

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

    def read_body(self, request: Request, limit: int):
        """The request's body (see http_io.read_body), with this server's idle timeout."""
        return read_body(request, limit, self.config.idle_timeout)

    def receive_xorb(self, request: Request, limit: int = MAX_XORB_BODY, crc: bool = False) -> AbstractAsyncContextManager[ReceivedXorb]:
        """The request's body as a xorb verified while it arrives (see xorb_intake.receive_xorb)."""
        return receive_xorb(request, self.receive_buffers, limit, self.config.idle_timeout, crc)

    @staticmethod
    def upload_stream(request: Request, claims: Claims) -> StreamRef | None:
        """The request's X-Git-Xet-Upload-Stream, if any (see upload_streams: our client's;
        malformed ones are ignored, as unknown headers are)."""
        parsed = parse_header(upload_stream_header(request.headers))
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

    hash_param = staticmethod(hash_param)

    def base_url(self, request: Request) -> str:
        """Where clients reach us: --public-url, else the request's own base URL."""
        return (self.config.public_url or str(request.base_url)).rstrip("/")

    def url_expiry(self, claims: Claims, now: float, unrevocable: bool = False) -> int:
        """When a URL handed out on `claims` stops working: after --url-ttl, never after the
        token itself, and, for a URL the store serves without asking us (`unrevocable`: a
        presigned bucket URL, which no revocation list reaches), within BUCKET_URL_MAX_TTL, so
        that revoking the token stops its URLs by then. Clients query the reconstruction again
        when a URL expires."""
        ttl = min(self.config.url_ttl, BUCKET_URL_MAX_TTL) if unrevocable else self.config.url_ttl
        return min(int(now) + ttl, claims.exp)

    def whole_file(self, stored: StoredFile, headers: dict[str, str] | None = None) -> Response:
        """A stored file's bytes as one paced response, each chunk checked as it is read."""
        return PacedStreamingResponse(
            self.store.iter_file_bytes(stored),
            self.config.idle_timeout,
            media_type="application/octet-stream",
            headers={"Content-Length": str(stored.size), **(headers or {})},
        )
