"""Object bytes in an S3-compatible bucket (AWS S3, MinIO, Cloudflare R2, Ceph, SeaweedFS).

An `S3ObjectStore` implements the ObjectStore protocol on one bucket and key prefix, plus what
upload grants and presigned downloads need (presigned PUT and ranged GET URLs, delete, list).

Why botocore: it is the AWS SDK's own signer and configuration chain (env variables
`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_PROFILE`,
`~/.aws/config`, instance roles), and it can presign a PUT with extra signed headers: signing an
`AWSRequest` with `S3SigV4QueryAuth` keeps `If-None-Match: *` and `x-amz-checksum-crc64nvme`
among the signed headers, which boto3's `generate_presigned_url` drops. Bulk throughput is
bounded by the network and by our own hashing, not by the client, at the request sizes we use
(whole xorbs up to 64 MiB, ranges of them).

`put_new` is a conditional PUT (`If-None-Match: *`): of racing writers exactly one gets True, the
others 412. Every PUT carries the body's CRC-64/NVME, so the store refuses a body damaged in
transit (400 BadDigest) instead of keeping it. `copy_new` is the same first-writer-wins write
done inside the store (a multipart upload whose first part is copied from another object and
whose completion is conditional): an upload grant's staged xorb becomes a stored one without
its bytes passing through the server a second time. Not every store makes that condition
atomic: SeaweedFS 4.x lets two racing completions both succeed (the later replaces the
object), so CasStore never relies on it alone (see MetadataIndex.xorb_writer_lock).
"""

from __future__ import annotations

import io
import sys
import time
from contextlib import contextmanager
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple
from urllib.parse import quote

from ..core.errors import XetError
from ..core.checksums import crc64nvme_header, crc64nvme_of_parts
from .errors import Unavailable

CONFLICT_RETRIES = 5  # 409 ConditionalRequestConflict: another conditional write on the key is in flight
# S3's smallest part but the last: copy_new's copied part must be at least this long.
MIN_COPY_PART_BYTES = 5 * 1024 * 1024
READ_STEP = 1024 * 1024  # bytes per readinto of read_into (and between its progress calls)
_KEY_PLACEHOLDER = "git-xet-object-key-placeholder"  # stands for the key in _object_url's template


class S3Error(Unavailable):
    """An S3 request failed in a way the caller should report; the message says what to do.
    `transient`: the service failed or could not be asked (no answer, or a 5xx), so a later
    attempt may succeed; `code` is S3's own error code, when it sent one."""

    def __init__(self, message: str, status: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.transient = status is None or status >= 500
        self.code = code


class ObjectTooLarge(XetError, ValueError):
    """An object is longer than its kind of object can be (read_bounded); `size` is its length."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


class S3Location(NamedTuple):
    """`s3://BUCKET[/PREFIX]`: a bucket and a key prefix (no leading/trailing slash)."""

    bucket: str
    prefix: str = ""

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name


def parse_s3_url(text: str) -> S3Location:
    """Parse `s3://BUCKET[/PREFIX]`; ValueError with the right form otherwise."""
    value = text.strip()
    if not value.lower().startswith("s3://"):
        raise ValueError(f"'{text}' is not an s3:// location; write s3://BUCKET or s3://BUCKET/PREFIX")
    rest = value[5:]
    bucket, _, prefix = rest.partition("/")
    prefix = prefix.strip("/")
    if not bucket or not all(c.isalnum() or c in "-._" for c in bucket) or not 3 <= len(bucket) <= 63:
        raise ValueError(f"'{text}' has no valid bucket name (3-63 letters, digits, '-', '.', '_'); write s3://BUCKET[/PREFIX]")
    if "?" in prefix or "#" in prefix or "//" in prefix or any(p in (".", "..") for p in prefix.split("/")):
        raise ValueError(f"'{text}' has an invalid key prefix; use plain path segments, e.g. s3://{bucket}/team/models")
    return S3Location(bucket, prefix)


class S3Config(NamedTuple):
    """Explicit client settings; a None field is resolved by botocore's usual chain (env, profile, config file)."""

    endpoint_url: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    region: str | None = None
    profile: str | None = None
    session_token: str | None = None  # temporary credentials (AWS_SESSION_TOKEN)

    def __repr__(self) -> str:  # the secrets never reach a log or a traceback
        shown = {name: "***" if name in ("secret_key", "session_token") and value else value for name, value in self._asdict().items()}
        return f"S3Config({', '.join(f'{name}={value!r}' for name, value in shown.items())})"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> S3Config:
        """The AWS SDK's variables from `env` (for a process whose os.environ is not `env`)."""
        return cls(
            endpoint_url=env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL"),
            access_key=env.get("AWS_ACCESS_KEY_ID"),
            secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION"),
            profile=env.get("AWS_PROFILE"),
            session_token=env.get("AWS_SESSION_TOKEN"),
        )


def _import_botocore() -> Any:
    try:
        import botocore.config
        import botocore.session  # the submodules this module uses
    except ImportError:
        raise S3Error(f"S3 storage needs botocore: from a git-xet checkout run: {sys.executable} -m pip install '.[s3]'") from None
    import botocore

    return botocore


class S3Connection(NamedTuple):
    """A botocore client and the credentials it signs with (presigned PUTs are signed by us)."""

    client: Any
    credentials: Any  # botocore Credentials (refreshing ones stay fresh), or None: none found

    def frozen_credentials(self) -> Any:
        if self.credentials is None:
            raise S3Error("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        return self.credentials.get_frozen_credentials()


def connect(config: S3Config | None = None, max_pool: int = 16) -> S3Connection:
    """A botocore S3 client: SigV4, path-style addressing when an endpoint is given (MinIO,
    SeaweedFS, Ceph usually need it), checksums only where we ask for them, standard retries."""
    botocore = _import_botocore()
    from botocore.credentials import Credentials

    config = config or S3Config()
    session = botocore.session.Session(profile=config.profile) if config.profile else botocore.session.Session()
    options: dict[str, Any] = {
        "signature_version": "s3v4",
        "retries": {"mode": "standard", "max_attempts": 5},
        "max_pool_connections": max_pool,
        "connect_timeout": 10,
        "read_timeout": 120,
        # botocore >= 1.36 adds a CRC32 trailer to every PUT by default, which several
        # S3-compatible stores refuse; we send CRC-64/NVME ourselves, as a plain header.
        "request_checksum_calculation": "when_required",
        "response_checksum_validation": "when_required",
    }
    endpoint = config.endpoint_url or _env_endpoint(session)
    if endpoint:
        options["s3"] = {"addressing_style": "path"}
    region = config.region or session.get_config_variable("region") or "us-east-1"
    if config.access_key and config.secret_key:
        credentials = Credentials(config.access_key, config.secret_key, config.session_token)
    else:
        credentials = session.get_credentials()
    client = session.create_client(
        "s3",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id=config.access_key,
        aws_secret_access_key=config.secret_key,
        aws_session_token=config.session_token if config.access_key else None,
        config=botocore.config.Config(**options),
    )
    return S3Connection(client, credentials)


def make_client(config: S3Config | None = None) -> Any:
    """Just the botocore client (tests use it to set up buckets)."""
    return connect(config).client


def _env_endpoint(session: Any) -> str | None:
    """The endpoint the usual chain names (AWS_ENDPOINT_URL[_S3], or endpoint_url in the profile)."""
    import os

    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or session.get_config_variable("endpoint_url")


def _crc_header(*parts: bytes | memoryview) -> str:
    """`x-amz-checksum-crc64nvme` of the concatenation of `parts`, computed part by part."""
    return crc64nvme_header(crc64nvme_of_parts(parts))


class PartsBody(io.RawIOBase):
    """The concatenation of `parts` as a seekable read-only stream, the body of one PUT.

    A server commit stores a verified xorb as its body plus a rebuilt footer: joining the two
    would make one more full copy of up to 64 MiB per commit. botocore reads this in blocks,
    seeks back to retry, and (over plain HTTP) hashes the payload through it first."""

    def __init__(self, parts: tuple[bytes | memoryview, ...]) -> None:
        super().__init__()
        self._parts = [memoryview(part).cast("B") for part in parts]
        self._size = sum(len(part) for part in self._parts)
        self._pos = 0

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = min(max(base + offset, 0), self._size)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        out = memoryview(buffer).cast("B")
        filled, start = 0, 0
        for part in self._parts:
            end = start + len(part)
            if self._pos < end and filled < len(out):
                piece = part[self._pos - start : self._pos - start + len(out) - filled]
                out[filled : filled + len(piece)] = piece
                filled += len(piece)
                self._pos += len(piece)
            start = end
        return filled


class S3ObjectStore:
    """ObjectStore on `s3://bucket/prefix`. Thread-safe (botocore clients are)."""

    read_piece = 16 * 1024 * 1024  # each read is a request: a few per 64 MiB xorb

    def __init__(self, location: S3Location, config: S3Config | None = None, connection: S3Connection | None = None) -> None:
        self.location = location
        self.bucket = location.bucket
        self.connection = connection or connect(config)
        self.client = self.connection.client
        botocore = _import_botocore()
        self._ClientError = botocore.exceptions.ClientError
        self._NoCredentials = botocore.exceptions.NoCredentialsError
        self._EndpointError = botocore.exceptions.EndpointConnectionError
        self._url_template: str | None = None  # see _object_url

    def __repr__(self) -> str:
        return f"S3ObjectStore({self.location}, endpoint={self.client.meta.endpoint_url})"

    # ------------------------------------------------------------------ errors

    def _status(self, exc: Exception) -> tuple[int | None, str]:
        response = getattr(exc, "response", {}) or {}
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return status, str(response.get("Error", {}).get("Code", ""))

    def _fail(self, action: str, key: str, exc: Exception) -> S3Error:
        """A clear error for a failed request: what failed, why, and what to check.

        Callers pass any exception a client call raised, not only botocore's own classes:
        botocore promises no closed set (its HTTP stack and response parsing can raise others),
        and every failure must reach the store's callers as an S3Error naming bucket and key."""
        if isinstance(exc, self._NoCredentials):
            return S3Error(f"no S3 credentials for {self.location}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE")
        if isinstance(exc, self._EndpointError):
            return S3Error(f"cannot reach the S3 endpoint {self.client.meta.endpoint_url}: check AWS_ENDPOINT_URL and the network")
        status, code = self._status(exc)
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken") or status == 403:
            hint = (
                "the access key is unknown to the store"
                if code == "InvalidAccessKeyId"
                else "the secret key does not match the access key"
                if code == "SignatureDoesNotMatch"
                else "the credentials are wrong (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_PROFILE) or may not do this "
                "(see the IAM permissions in the README)"
            )
            return S3Error(f"S3 refused to {action} {self.location.bucket}/{key} ({code or status}): {hint}", status, code)
        if code == "NoSuchBucket":
            return S3Error(f"the bucket {self.bucket} does not exist at {self.client.meta.endpoint_url}: create it, or fix the s3:// location", status, code)
        return S3Error(f"S3 could not {action} {self.location.bucket}/{key}: {code or status} {exc}", status, code)

    # ------------------------------------------------------------------ ObjectStore

    def put(self, key: str, *parts: bytes | memoryview) -> None:
        full = self.location.key(key)
        try:
            self.client.put_object(Bucket=self.bucket, Key=full, Body=PartsBody(parts), ChecksumCRC64NVME=_crc_header(*parts))
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("write", full, exc) from None

    def put_new_many(self, items: Sequence[tuple[str, tuple[bytes | memoryview, ...]]]) -> list[bool]:
        return [self.put_new(key, *parts) for key, parts in items]  # (a request each: no transactions here)

    def put_new(self, key: str, *parts: bytes | memoryview) -> bool:
        full = self.location.key(key)
        crc = _crc_header(*parts)
        for attempt in range(CONFLICT_RETRIES):
            try:
                self.client.put_object(Bucket=self.bucket, Key=full, Body=PartsBody(parts), ChecksumCRC64NVME=crc, IfNoneMatch="*")
                return True
            except self._ClientError as exc:
                status, code = self._status(exc)
                if status == 412 or code == "PreconditionFailed":
                    return False
                if status == 409 and attempt + 1 < CONFLICT_RETRIES:  # a racing conditional write; its outcome decides
                    time.sleep(0.05 * 2**attempt)
                    continue
                raise self._fail("write", full, exc) from None
            except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
                raise self._fail("write", full, exc) from None
        raise S3Error(f"S3 kept answering 409 for {self.bucket}/{full}")

    @contextmanager
    def _reading(self, key: str) -> Iterator[str]:
        """The full key of `key`, for a read whose failures become FileNotFoundError (the object
        is absent) or S3Error (see _fail)."""
        full = self.location.key(key)
        try:
            yield full
        except S3Error:
            raise
        except self._ClientError as exc:
            status, code = self._status(exc)
            if status == 404 or code in ("NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.location}/{key} does not exist") from None
            raise self._fail("read", full, exc) from None
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("read", full, exc) from None

    def read(self, key: str) -> bytes:
        with self._reading(key) as full:
            return self.client.get_object(Bucket=self.bucket, Key=full)["Body"].read()

    def read_bounded(self, key: str, limit: int) -> bytes:
        """The whole object, if it is at most `limit` bytes; else ObjectTooLarge, having read
        none of it (the length is checked before the body is read: what someone else wrote to
        a shared bucket cannot make a reader allocate more than `limit`)."""
        with self._reading(key) as full:
            response = self.client.get_object(Bucket=self.bucket, Key=full)
            length = int(response["ContentLength"])
            if length <= limit:
                return response["Body"].read()
            response["Body"].close()
        raise ObjectTooLarge(f"{self.location}/{key} is {length} bytes, more than the {limit} it can be", length)

    def read_into(self, key: str, buffer: Any, progress: Callable[[int], None] | None = None) -> int:
        """Read the whole object into the start of `buffer` (a writable buffer at least as
        long as the object), calling `progress(bytes so far)` every READ_STEP bytes, so that a
        caller can work on the first bytes while the rest arrive; returns the length.
        FileNotFoundError when it does not exist; S3Error when it is longer than `buffer`."""
        view = memoryview(buffer).cast("B")
        with self._reading(key) as full:
            response = self.client.get_object(Bucket=self.bucket, Key=full)
            length = int(response["ContentLength"])
            if length > len(view):
                response["Body"].close()
                raise S3Error(f"{self.location.bucket}/{full} is {length} bytes, more than the {len(view)} expected")
            body, done = response["Body"], 0
            while done < length:
                got = body.readinto(view[done : min(done + READ_STEP, length)])
                if not got:
                    raise S3Error(f"S3 sent {done} of the {length} bytes of {self.location.bucket}/{full}")
                done += got
                if progress is not None:
                    progress(done)
            return length

    def copy_new(self, source_key: str, key: str, tail: bytes) -> bool:
        """Create `key` as the object `source_key` followed by `tail`, inside the store, if
        `key` does not exist yet: True if this call created it, False if it existed (or a
        racing writer completed first: the completion is conditional, If-None-Match: *).
        `source_key` must be at least MIN_COPY_PART_BYTES long (S3's rule for a part that is
        not the last); an interrupted copy leaves no object, and its upload is aborted."""
        full = self.location.key(key)
        source = {"Bucket": self.bucket, "Key": self.location.key(source_key)}
        try:
            upload = self.client.create_multipart_upload(Bucket=self.bucket, Key=full)["UploadId"]
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("write", full, exc) from None
        try:
            copied = self.client.upload_part_copy(Bucket=self.bucket, Key=full, UploadId=upload, PartNumber=1, CopySource=source)
            last = self.client.upload_part(
                Bucket=self.bucket, Key=full, UploadId=upload, PartNumber=2, Body=tail, ChecksumCRC64NVME=_crc_header(tail)
            )
            parts = [{"PartNumber": 1, "ETag": copied["CopyPartResult"]["ETag"]}, {"PartNumber": 2, "ETag": last["ETag"]}]
            self.client.complete_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload, MultipartUpload={"Parts": parts}, IfNoneMatch="*")
            return True
        except self._ClientError as exc:
            self._abort(full, upload)
            status, code = self._status(exc)
            if status == 412 or code == "PreconditionFailed":
                return False
            if status == 404 or code in ("NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.location}/{source_key} does not exist") from None
            raise self._fail("write", full, exc) from None
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            self._abort(full, upload)
            raise self._fail("write", full, exc) from None

    def _abort(self, full: str, upload: str) -> None:
        """Drop an unfinished multipart upload (its parts cost storage until then); a failure
        here leaves it to the bucket's lifecycle rule for incomplete uploads."""
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload)
        except Exception:  # noqa: BLE001 - best effort: the caller reports the original failure
            pass

    def read_range(self, key: str, start: int, end_inclusive: int) -> bytes:
        full = self.location.key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes={start}-{end_inclusive}")
            data = response["Body"].read()
        except self._ClientError as exc:
            status, code = self._status(exc)
            if status == 416 or code == "InvalidRange":
                return b""
            if status == 404 or code in ("NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.location}/{key} does not exist") from None
            raise self._fail("read", full, exc) from None
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("read", full, exc) from None
        if response["ResponseMetadata"]["HTTPStatusCode"] == 200:  # a store that ignored Range
            return data[start : end_inclusive + 1]
        return data

    def read_tail(self, key: str, length: int) -> tuple[bytes, int]:
        """(the last `length` bytes of the object, or all of it if shorter; its total size), in one GET."""
        full = self.location.key(key)
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=full, Range=f"bytes=-{length}")
            data = response["Body"].read()
        except self._ClientError as exc:
            status, code = self._status(exc)
            if status == 416 or code == "InvalidRange":  # an empty object has no suffix to serve
                return b"", 0
            if status == 404 or code in ("NoSuchKey", "NotFound"):
                raise FileNotFoundError(f"{self.location}/{key} does not exist") from None
            raise self._fail("read", full, exc) from None
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("read", full, exc) from None
        content_range = response.get("ContentRange") or ""
        total = int(content_range.rsplit("/", 1)[1]) if "/" in content_range else len(data)
        if response["ResponseMetadata"]["HTTPStatusCode"] == 200:  # whole object: a store that ignored Range
            return data[-length:], len(data)
        return data, total

    def exists(self, key: str) -> bool:
        return self.size(key) is not None

    def size(self, key: str) -> int | None:
        """The object's length in bytes, or None when it does not exist (one HEAD)."""
        head = self._head(key)
        return None if head is None else int(head["ContentLength"])

    def modified(self, key: str) -> float | None:
        """The object's last-modified time, or None when it does not exist (one HEAD)."""
        head = self._head(key)
        return None if head is None else float(head["LastModified"].timestamp())

    def _head(self, key: str) -> dict[str, Any] | None:
        """The object's HEAD response, or None when it does not exist."""
        full = self.location.key(key)
        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=full))
        except self._ClientError as exc:
            status, code = self._status(exc)
            if status == 404 or code in ("NoSuchKey", "NotFound", "404"):
                return None
            raise self._fail("look up", full, exc) from None
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("look up", full, exc) from None

    # ------------------------------------------------------------------ beyond the protocol

    def check(self) -> None:
        """Fail now, with a message that says what to fix, when the bucket cannot be reached or read."""
        try:
            self.client.list_objects_v2(Bucket=self.bucket, Prefix=self.location.key(""), MaxKeys=1)
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("list", self.location.key(""), exc) from None

    def delete(self, key: str) -> None:
        """Remove the object (no error if it is absent)."""
        full = self.location.key(key)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=full)
        except Exception as exc:  # noqa: BLE001 - any failure of a call: see _fail
            raise self._fail("delete", full, exc) from None

    def list(self, prefix: str = "") -> Iterator[tuple[str, float]]:
        """(key relative to the store's prefix, last-modified Unix time) of every object under
        `prefix`, in key order: the ObjectStore protocol, which fsck and gc's grace period read."""
        for key, _size, modified in self.list_entries(prefix):
            yield key, modified

    def sizes(self, prefix: str = "") -> Iterator[tuple[str, int]]:
        """(key relative to the store's prefix, size) of every object under `prefix`, in key order."""
        for key, size, _modified in self.list_entries(prefix):
            yield key, size

    def list_entries(self, prefix: str = "") -> Iterator[tuple[str, int, float]]:
        """(key relative to the store's prefix, size, last-modified Unix time) under `prefix`."""
        full = self.location.key(prefix) if prefix else (self.location.prefix + "/" if self.location.prefix else "")
        strip = len(self.location.prefix) + 1 if self.location.prefix else 0
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full):
                for item in page.get("Contents", ()):
                    yield item["Key"][strip:], int(item["Size"]), item["LastModified"].timestamp()
        except self._ClientError as exc:
            raise self._fail("list", full, exc) from None

    def presign_range(self, key: str, start: int, end_inclusive: int, ttl: int) -> str:
        """A URL that GETs exactly bytes [start, end_inclusive] of the object without
        credentials for `ttl` seconds: `Range: bytes=START-END` is a signed header, so the store
        refuses the URL without that Range or with any other (403 SignatureDoesNotMatch), where
        an unsigned Range would let its holder read the whole object."""
        return self._presign("GET", key, {"Range": f"bytes={start}-{end_inclusive}"}, ttl)

    def presign_put_new(self, key: str, length: int, crc: int, ttl: int) -> tuple[str, dict[str, str]]:
        """A URL and the headers that PUT a body of `length` bytes with CRC-64/NVME `crc` to a
        key that does not exist yet. Content-Length, If-None-Match and the checksum are signed,
        so the store refuses a longer or shorter body (403), another body (400 BadDigest), a
        second upload (412), and the URL after `ttl` seconds (403). The headers returned leave
        out Content-Length: every HTTP client sets it from the body itself."""
        headers = {"If-None-Match": "*", "x-amz-checksum-crc64nvme": crc64nvme_header(crc)}
        return self._presign("PUT", key, {**headers, "Content-Length": str(length)}, ttl), headers

    def _object_url(self, key: str) -> str:
        """The unsigned URL of the object in the client's addressing style (path or virtual
        host), from a template botocore makes once: making it for each URL cost 1.2 ms, most
        of a reconstruction's signing."""
        if self._url_template is None:
            signed = self.client.generate_presigned_url("get_object", Params={"Bucket": self.bucket, "Key": _KEY_PLACEHOLDER}, ExpiresIn=60)
            self._url_template = signed.split("?", 1)[0]
        head, _, tail = self._url_template.rpartition(_KEY_PLACEHOLDER)
        return head + quote(self.location.key(key), safe="/~") + tail

    def _presign(self, method: str, key: str, headers: dict[str, str], ttl: int) -> str:
        """`method` on the object as a presigned URL with `headers` among its signed headers
        (boto3's generate_presigned_url signs none of them; S3SigV4QueryAuth keeps them)."""
        from botocore.auth import S3SigV4QueryAuth
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=self._object_url(key), headers=dict(headers))
        S3SigV4QueryAuth(self.connection.frozen_credentials(), "s3", self.client.meta.region_name, expires=ttl).add_auth(request)
        return request.prepare().url


def open_s3_objects(url: str, config: S3Config | None = None) -> S3ObjectStore:
    """The store at `s3://BUCKET[/PREFIX]`, configured by the AWS SDK's usual chain unless
    `config` says otherwise. Nothing is sent yet: see S3ObjectStore.check."""
    return S3ObjectStore(parse_s3_url(url), config)
