"""XET CAS over HTTP, as the real servers (the Hub's CAS, `git xet serve`) expect it."""

from __future__ import annotations

import json
import logging
import os
from typing import TYPE_CHECKING, Any, NamedTuple

from ..version import __version__
from ..core.checksums import crc64nvme, crc64nvme_of_parts
from ..core.errors import FormatError
from ..core.hashes import hash_to_hex
from ..core.http_headers import new_session_id
from ..core.reconstruction import FetchRange, Reconstruction
from ..core.scattered import OutgoingBytes, parts_of
from ..core.shard import Shard, parse_shard
from ..platform.memory import xorb_range_windows
from .capabilities import ServerCapabilities
from .errors import NotFoundError, RangeNotSatisfiableError, TransferError, UrlExpiredError, error_from_body, for_status
from .http_errors import status_error, unless_refused
from .retry import Outage, RetryPolicy, with_retries
from .token_policy import may_send_credentials, plain_http_refusal
from .tokens import StaticToken, TokenSource
from .http_types import HttpClient, Response, Timeouts

if TYPE_CHECKING:
    from .serve_extension import ServeExtension

log = logging.getLogger("git_xet.client")

USER_AGENT = f"git-xet/{__version__}"
# Connect fast-ish, but let a busy server take its time on big bodies.
DEFAULT_TIMEOUT = Timeouts(connect=60.0, read=300.0, write=300.0)
_POOLED_WINDOW_MIN = 1 << 20
# Bounds on what a server can make us read: the largest answer we parse (JSON, shard frames, a
# dedup shard; a reconstruction of a heavily fragmented multi-GB file stays far below), and how
# much of an error body we keep for its message.
MAX_ANSWER_BYTES = 64 * 1024 * 1024
MAX_ERROR_BYTES = 64 * 1024
MAX_KEPT_ALIVE = 16  # idle connections a client keeps
_SKIP_PIECE = 64 << 10


MAX_GRANTS = 3  # per xorb, as hf-xet (HF_XET_CLIENT_MAX_XORB_GRANT_ATTEMPTS)
# A grant costs two more round trips (grant, commit) than a direct POST. For a small xorb (the
# last of a push, or each file of a push of many small files) those round trips cost more than
# the server's CPU for its bytes, so it is posted directly; grants carry the big ones.
DIRECT_UPLOAD_BELOW = 1 << 20


def _legacy_upload() -> bool:
    """$GIT_XET_LEGACY_DIRECT_XORB_UPLOAD=1 (or hf-xet's own switch) skips upload grants."""
    return any(os.environ.get(name) == "1" for name in ("GIT_XET_LEGACY_DIRECT_XORB_UPLOAD", "HF_XET_CLIENT_LEGACY_DIRECT_XORB_UPLOAD"))


class _Grant(NamedTuple):
    """Where and how to PUT one xorb: the server's word, used verbatim."""

    id: str
    method: str
    url: str
    headers: dict[str, str]

    def __repr__(self) -> str:
        return f"_Grant({self.id!r}, {self.method}, <url hidden>)"  # presigned URLs are credentials

    @classmethod
    def parse(cls, resp: Response) -> _Grant:
        try:
            body = resp.json()
            grant = cls(str(body["id"]), str(body["method"]).upper(), str(body["url"]), {str(k): str(v) for k, v in body["headers"].items()})
        except (ValueError, KeyError, TypeError, AttributeError):
            raise TransferError("the server answered an upload grant request with something unexpected", retryable=True) from None
        if not grant.url.startswith(("https://", "http://")) or not grant.id.replace("-", "").replace("_", "").isalnum():
            raise TransferError("the server granted an upload to an unusable URL or id")
        return grant


def timeout_from_env() -> Timeouts:
    """DEFAULT_TIMEOUT, or $GIT_XET_HTTP_TIMEOUT seconds for reads and writes (a stalled
    connection is abandoned and retried after that long)."""
    value = os.environ.get("GIT_XET_HTTP_TIMEOUT", "")
    try:
        seconds = float(value)
    except ValueError:
        return DEFAULT_TIMEOUT
    return Timeouts(connect=min(60.0, seconds), read=seconds, write=seconds) if seconds > 0 else DEFAULT_TIMEOUT


def make_http_client(timeouts: Timeouts | None = None) -> HttpClient:
    """One pooled client (client/http_client.py: httpx, imported only now), directly or through
    the proxy the environment names. It verifies TLS against the OS certificate store plus
    SSL_CERT_FILE/SSL_CERT_DIR, so corporate CAs installed on the machine work without extra
    configuration."""
    from .http_client import Client

    return Client(timeouts or timeout_from_env(), headers={"User-Agent": USER_AGENT}, max_idle=MAX_KEPT_ALIVE)


def _new_window(size: int) -> bytearray | memoryview:
    """A buffer for a xorb range of `size` bytes. A large one is a recycled map (see
    memory.WindowPool): no fresh pages to fault in."""
    pooled = _POOLED_WINDOW_MIN <= size <= xorb_range_windows().capacity
    return xorb_range_windows().take(size) if pooled else bytearray(size)


def _give_back_window(window: bytearray | memoryview) -> None:
    if isinstance(window, memoryview):
        xorb_range_windows().give_back(window)


def _read_window(resp: Response, skip: int, size: int, *, exact: bool) -> tuple[bytearray | memoryview, int]:
    """Bytes [skip, skip + size) of a body, straight into one buffer of `size` bytes: no pieces
    joined at the end (which briefly doubles a 16 MiB range in memory), and nothing outside the
    window kept. With `exact`, a body longer than the window is an error; otherwise (a server
    that ignored Range) reading stops at the window's end."""
    scratch = memoryview(bytearray(min(skip, _SKIP_PIECE)))
    while skip:
        skipped = resp.readinto(scratch[: min(skip, len(scratch))])
        if not skipped:
            return bytearray(), 0
        skip -= skipped
    buf = _new_window(size)
    try:
        received = resp.readinto(memoryview(buf))
        if exact and received == size and resp.readinto(memoryview(bytearray(1))):
            raise TransferError(f"xorb range longer than the {size} bytes asked for", retryable=True)
    except BaseException:
        _give_back_window(buf)
        raise
    return buf, received


class HttpCasBackend:
    def __init__(
        self,
        endpoint: str,
        tokens: TokenSource | None = None,
        *,
        session_id: str | None = None,
        policy: RetryPolicy | None = None,
        http: HttpClient | None = None,
        extension: bool = False,
    ) -> None:
        """`extension`: the URL is a store location (a `git xet serve`, not a CAS an LFS server
        named), so the server may offer our extension (core/extension.py), and is asked once
        what it offers (see the `extension` property); never asked otherwise.
        `http`: the client to send requests with (the agent's router shares one among its
        backends); by default the backend makes its own, and closes it."""
        self.endpoint = endpoint.rstrip("/")
        self.tokens = tokens or StaticToken(None)
        self.session_id = session_id or new_session_id()
        self.policy = policy or RetryPolicy.from_env()
        self.outage = Outage()  # one retry budget for all of this store's calls (client/retry.py)
        self._owns_http = http is None  # a client passed in is its owner's to close
        self.http = http or make_http_client()
        from .http_auth import StoreAuth  # (httpx: imported with the client)

        self._auth = StoreAuth(self.session_id, self.tokens)  # CAS calls: session id and token
        self._session_only = StoreAuth(self.session_id)  # presigned URLs: the session id alone
        self._grants_offered = True  # until the server answers a grant request with 404
        self.capabilities = ServerCapabilities(lambda path, ok: self.request("capabilities request", "GET", path, ok=ok), asked=extension)
        self._extension: ServeExtension | None = None

    def close(self) -> None:
        """Close the connection pool, unless it was passed in (then its owner closes it)."""
        if self._owns_http:
            self.http.close()

    @property
    def cache_key(self) -> str:
        return self.endpoint

    @property
    def extension(self) -> ServeExtension | None:
        """Our extension, where the server lists it in its capabilities answer (asked the
        first time this is read); None for any other server, which is used through XET alone."""
        if self._extension is None:
            offered = self.capabilities.get()
            if offered is None:
                return None
            from .serve_extension import ServeExtension

            self._extension = ServeExtension(self, offered)
        return self._extension

    # ------------------------------------------------------------------ plumbing

    def token(self) -> str | None:
        """The current token, refused (never sent) when this CAS is plain http off this
        machine: wherever the URL came from (config, a batch response), a bearer token on an
        unencrypted network is readable on every hop."""
        token = self.tokens.token()
        if token and not may_send_credentials(self.endpoint):
            raise TransferError(plain_http_refusal(self.endpoint, "for this CAS"))
        return token

    def request(
        self,
        what: str,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...] = (200,),
        body: OutgoingBytes | None = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
        answer_limit: int = MAX_ANSWER_BYTES,
    ) -> Response:
        """One CAS call, signed by the client's auth layer (session id, token, a 401 refreshing
        it once: client/http_auth.py), under the store's retry policy. An answer longer than
        `answer_limit` bytes is refused unread."""

        def attempt() -> Response:
            resp = self.http.request(method, self.endpoint + path, headers=headers, body=body, json=json, stream=True, auth=self._auth)
            if resp.status_code not in ok:
                resp.read(MAX_ERROR_BYTES, truncate=True)
                raise status_error(what, resp)
            resp.read(answer_limit)
            return resp

        return with_retries(what, attempt, self.policy, self.outage, self.endpoint)

    # ------------------------------------------------------------------ uploads

    @staticmethod
    def posts_directly(size: int) -> bool:
        """Whether a xorb of `size` bytes goes in one POST whether or not the server offers
        grants (see DIRECT_UPLOAD_BELOW)."""
        return size < DIRECT_UPLOAD_BELOW

    def upload_xorb(self, xorb_hex: str, body: OutgoingBytes) -> bool:
        """Through an upload grant where the server offers them (as hf-xet >= 1.8 does: the
        bytes may go straight to object storage), else `POST /v1/xorbs`. Xorbs under
        DIRECT_UPLOAD_BELOW bytes are posted directly either way."""
        return self.send_xorb(xorb_hex, body, None)

    def send_xorb(self, xorb_hex: str, body: OutgoingBytes, named: dict[str, str] | None) -> bool:
        """upload_xorb, with these headers (the extension's upload stream) on each request to
        the CAS, never on a grant's PUT: a presigned PUT carries exactly the grant's headers."""
        if len(body) >= DIRECT_UPLOAD_BELOW and self._may_grant() and crc64nvme is not None and not _legacy_upload():
            uploaded = self._upload_granted(xorb_hex, body, named)
            if uploaded is not None:
                return uploaded
        resp = self.request(f"upload of xorb {xorb_hex[:12]}", "POST", f"/v1/xorbs/default/{xorb_hex}", body=body, headers=named)
        try:
            return bool(resp.json()["was_inserted"])
        except (ValueError, KeyError, TypeError):
            raise TransferError("the server answered a xorb upload with something unexpected", retryable=True) from None

    def _may_grant(self) -> bool:
        """Whether to ask for an upload grant: not once the server answered one with 404, nor
        where its capabilities say it offers none (then no request finds that out)."""
        offered = self.capabilities.get()
        return self._grants_offered and (offered is None or offered.upload_grants)

    def _upload_granted(self, xorb_hex: str, body: OutgoingBytes, named: dict[str, str] | None) -> bool | None:
        """Grant, PUT, commit; True if this upload stored the xorb, False if it was already
        stored, None if the server offers no grants (then remembered for this backend).

        hf-xet's contract: grant 200 = stored already; 404 = no grants; PUT 412 = an earlier
        attempt uploaded it; PUT 403 (expired) or commit 404 (nothing arrived) = a new grant,
        at most MAX_GRANTS per xorb.
        """
        assert crc64nvme is not None
        what = f"upload grant for xorb {xorb_hex[:12]}"
        payload = {"length": len(body), "checksum": {"algo": "crc64nvme", "value": str(crc64nvme_of_parts(parts_of(body)))}}
        for _ in range(MAX_GRANTS):
            resp = self.request(what, "POST", f"/v1/xorb-grants/default/{xorb_hex}", ok=(200, 201, 404), json=payload, headers=named)
            if resp.status_code == 404:
                log.info("the server offers no upload grants; uploading xorbs directly")
                self._grants_offered = False
                return None
            if resp.status_code == 200:
                return False
            grant = _Grant.parse(resp)
            put_status = self._put_granted(xorb_hex, grant, body)
            if put_status == 403:
                log.info("upload grant for xorb %s expired before its PUT; asking for another", xorb_hex[:12])
                continue
            commit_path = f"/v1/xorb-commits/default/{xorb_hex}/grant/{grant.id}"
            commit = self.request(f"commit of xorb {xorb_hex[:12]}", "POST", commit_path, ok=(200, 201, 204, 404), headers=named)
            if commit.status_code == 404:
                log.info("the server saw no upload for grant of xorb %s; asking for another", xorb_hex[:12])
                continue
            return put_status != 412
        raise TransferError(f"upload of xorb {xorb_hex[:12]}: {MAX_GRANTS} upload grants went unused (expired or lost)", retryable=True)

    def _put_granted(self, xorb_hex: str, grant: _Grant, body: OutgoingBytes) -> int:
        """PUT the body where the grant says, with exactly its headers and no CAS token;
        transient failures are retried; returns the status (2xx, 403 or 412)."""

        def attempt() -> int:
            with self.http.request(grant.method, grant.url, headers=grant.headers, body=body, stream=True, auth=self._session_only) as resp:
                if resp.status_code in (403, 412) or 200 <= resp.status_code < 300:
                    return resp.status_code
                resp.read(MAX_ERROR_BYTES, truncate=True)
                raise status_error(f"upload of xorb {xorb_hex[:12]} to its grant URL", resp)

        return with_retries(f"upload of xorb {xorb_hex[:12]}", attempt, self.policy, self.outage, self.endpoint)

    def upload_shard(self, body: bytes) -> bool:
        return self.send_shard(body, None)

    def send_shard(self, body: bytes, named: dict[str, str] | None) -> bool:
        """upload_shard, with these headers (the extension's upload stream)."""
        try:
            resp = self.request("shard upload", "POST", "/v2/shards", body=body, headers=named)
        except TransferError as exc:
            if exc.status not in (404, 501):
                raise
            resp = self.request("shard upload (v1)", "POST", "/v1/shards", body=body, headers=named)
            try:
                answer = resp.json()
                inserted = int(answer["result"]) == 1
            except (ValueError, KeyError, TypeError):
                raise TransferError("the server answered a shard upload with something unexpected", retryable=True) from None
            return unless_refused(answer, inserted)
        return self._read_shard_frames(resp.text)

    @staticmethod
    def _read_shard_frames(text: str) -> bool:
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                frame = json.loads(line)
            except ValueError:
                raise TransferError(f"unreadable shard upload progress frame: {line[:200]}", retryable=True) from None
            kind = frame.get("type") if isinstance(frame, dict) else None
            if kind == "result":
                result = frame.get("result")
                if not isinstance(result, int) or isinstance(result, bool):
                    raise TransferError(f"malformed shard upload result frame: {line[:200]}", retryable=True)
                return unless_refused(frame, result == 1)
            if kind == "error":
                refusal = error_from_body(line)
                message = f"the server refused the shard: {refusal.message[:500]}"
                status = frame.get("status")  # the status the refusal stands for (git-xet servers send it)
                if not isinstance(status, int) or isinstance(status, bool):
                    status = 500 if frame.get("retryable") is True else 400
                error_class = for_status(status, refusal.code, refusal.message)
                raise error_class(message, retryable=frame.get("retryable") is True, code=refusal.code)
        raise TransferError("shard upload answer ended without a result", retryable=True)

    # ------------------------------------------------------------------ lookups

    def query_dedup(self, chunk_hash: bytes) -> Shard | None:
        try:
            resp = self.request("dedup query", "GET", f"/v1/chunks/default/{hash_to_hex(chunk_hash)}", ok=(200, 404))
        except TransferError as exc:
            log.info("global dedup query failed, continuing without it: %s", exc)
            return None
        if resp.status_code == 404:
            return None
        try:
            return parse_shard(resp.content)
        except FormatError as exc:
            log.warning("ignoring a malformed dedup answer: %s", exc)
            return None

    # ------------------------------------------------------------------ downloads

    def reconstruction(self, file_hex: str, byte_range: tuple[int, int] | None = None) -> Reconstruction:
        headers = {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"} if byte_range else {}
        for version in (2, 1):
            try:
                resp = self.request(f"reconstruction of {file_hex[:12]}", "GET", f"/v{version}/reconstructions/{file_hex}", headers=headers)
            except TransferError as exc:
                if exc.status == 416:
                    raise RangeNotSatisfiableError(f"byte range {byte_range} is past the end of file {file_hex}", status=416) from None
                if exc.status in (404, 501) and version == 2:
                    continue  # the v2 route may not exist; v1 tells a missing file apart
                if exc.status == 404:
                    raise NotFoundError(f"file {file_hex} is not on the server {self.endpoint}", status=404) from None
                raise
            try:
                return Reconstruction.from_json(resp.json())
            except (ValueError, FormatError) as exc:
                raise TransferError(f"malformed reconstruction answer for {file_hex}: {exc}", retryable=True) from None
        raise AssertionError("unreachable")

    def fetch(self, fetch: FetchRange) -> bytes | bytearray | memoryview:
        if fetch.url is None:
            raise TransferError("reconstruction answer has no URL for a xorb range")
        url = fetch.url
        expected = fetch.byte_end - fetch.byte_start + 1

        def attempt() -> bytes | bytearray | memoryview:
            # Presigned URL: exactly the signed Range, and no bearer token.
            headers = {"Range": f"bytes={fetch.byte_start}-{fetch.byte_end}"}
            with self.http.request("GET", url, headers=headers, stream=True, auth=self._session_only) as resp:
                if resp.status_code == 403:
                    raise UrlExpiredError(f"xorb URL for {fetch.xorb[:12]} refused (expired)", status=403)
                if resp.status_code not in (200, 206):
                    resp.read(MAX_ERROR_BYTES, truncate=True)
                    raise status_error(f"download of xorb {fetch.xorb[:12]}", resp)
                # 200: the server ignored Range and sends the whole object; take our window.
                skip = fetch.byte_start if resp.status_code == 200 else 0
                data, received = _read_window(resp, skip, expected, exact=resp.status_code == 206)
            if received != expected:
                _give_back_window(data)
                raise TransferError(f"xorb range for {fetch.xorb[:12]} truncated ({received} of {expected} bytes)", retryable=True)
            return data

        return with_retries(f"download of xorb {fetch.xorb[:12]}", attempt, self.policy, self.outage, self.endpoint)
