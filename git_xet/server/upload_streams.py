"""The sha256 of a file, computed while its xorbs arrive instead of after its shard.

A shard claiming a file's sha256 (its Git LFS oid) is accepted only once the server has
computed that sha256 from the stored bytes. Done when the shard comes, that pass (~1 s per
GiB) is the whole end of an upload: the client has sent everything and waits for it. So our
client numbers the xorbs it uploads between two shards: `X-Xet-Upload-Stream: <id> <seq>`
on each xorb upload (or its grant, or its commit), `X-Xet-Upload-Stream: <id>` on the
shard. Here each xorb that a request newly stored is hashed, in `seq` order, while the client
goes on uploading: from the request's buffer when it is next in line, else read back from the
store in a thread of this module's. The shard's registration then continues from that digest
(cas_store.Sha256Prefix) for a file that begins with those xorbs, whole.

Why it is sound: the digest is ours, computed from what the store holds under those xorb
hashes, in the order the stream lists them; a file that begins with those whole xorbs begins
with exactly that content. A client that numbers wrongly, or a stream that breaks (a gap
too large, a repeat, a process restart, another `--workers` process), costs the shortcut,
never correctness: registration then reads the file as before.

Why it is bounded: streams are keyed by the token's identity and repo and the client's id
(one client cannot touch another's); at most MAX_STREAMS of them per process, dropped oldest
first and after IDLE_SECONDS unused; at most MAX_STREAM_XORBS xorbs each, and MAX_AHEAD
waiting for their predecessors. A xorb is hashed only when a request stored it (its body
arrived, and was verified), at most once: the work is at most one sha256 pass over bytes
the server received anyway.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from ..storage.cas_store import Sha256Prefix

log = logging.getLogger("git_xet.server")

MAX_STREAMS = 64
MAX_STREAM_XORBS = 16384  # 1 TiB of 64 MiB xorbs: 512 KiB of xorb hashes at most per stream
MAX_AHEAD = 8  # how far past the first missing xorb one may arrive (clients upload a few at once)
IDLE_SECONDS = 600.0
PREFIX_WAIT_SECONDS = 60.0  # how long a shard waits for the hashing of xorbs already stored
HASHING_THREADS = 2

# A xorb's decoded content, a list of chunks per piece (CasStore.xorb_pieces).
XorbContent = Callable[[bytes], Iterable[list[bytes | memoryview]]]


class StreamRef(NamedTuple):
    """What a request says of its upload stream: the registry key, and the xorb's number (None
    on a shard)."""

    key: str
    seq: int | None


def stream_key(owner: str, repo: str, stream_id: str) -> str:
    """The registry key of a client's stream: its token's identity and repo, and its id.
    Derived (not the parts themselves) so that it may travel in a signed grant URL."""
    return hashlib.sha256(f"{owner}\0{repo}\0{stream_id}".encode()).hexdigest()[:32]


def parse_header(value: str | None) -> tuple[str, int | None] | None:
    """`<id>` or `<id> <seq>` (id: 8 to 64 characters of [0-9a-f-]); None if malformed."""
    if not value:
        return None
    parts = value.split()
    if not 1 <= len(parts) <= 2 or not 8 <= len(parts[0]) <= 64 or not all(c in "0123456789abcdef-" for c in parts[0]):
        return None
    if len(parts) == 1:
        return parts[0], None
    if not parts[1].isdigit() or int(parts[1]) >= MAX_STREAM_XORBS:
        return None
    return parts[0], int(parts[1])


class _Stream:
    def __init__(self) -> None:
        self.changed = threading.Condition()  # guards everything below
        self.digest = hashlib.sha256()
        self.hashed: list[bytes] = []  # the xorbs in `digest`, in order
        self.waiting: dict[int, bytes] = {}  # seq -> xorb stored, its predecessors not hashed yet
        self.broken = False
        self.hashing = False
        self.used = time.monotonic()


class UploadStreams:
    """The streams of this server process (see the module's docstring)."""

    def __init__(self, content: XorbContent) -> None:
        self._content = content
        self._streams: OrderedDict[str, _Stream] = OrderedDict()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(HASHING_THREADS, thread_name_prefix="git-xet-upload-stream")

    def _stream(self, key: str, create: bool) -> _Stream | None:
        now = time.monotonic()
        with self._lock:
            stream = self._streams.get(key)
            if stream is None and create:
                for old in [k for k, s in self._streams.items() if now - s.used > IDLE_SECONDS]:
                    del self._streams[old]
                while len(self._streams) >= MAX_STREAMS:
                    self._streams.popitem(last=False)
                stream = self._streams[key] = _Stream()
            if stream is not None:
                stream.used = now
                self._streams.move_to_end(key)
            return stream

    def stored(self, key: str, seq: int, xorb_hash: bytes, held: Iterable[list[bytes | memoryview]] | None = None) -> None:
        """A request stored xorb `xorb_hash` as number `seq` of stream `key`: hash it once its
        predecessors are. `held`: its content while the request still holds it in memory;
        when the xorb is next in line it is hashed from there, in the caller's thread, before
        this returns (a 64 MiB xorb: ~50 ms of sha256, instead of reading it back later).
        Anything else is hashed in a thread of ours, read back from the store."""
        stream = self._stream(key, create=True)
        assert stream is not None
        with stream.changed:
            if stream.broken:
                return
            expected = len(stream.hashed)
            missing = expected  # the first number not arrived yet (the ones before it wait for hashing only)
            while missing in stream.waiting:
                missing += 1
            if seq < expected or seq in stream.waiting or seq >= missing + MAX_AHEAD or seq >= MAX_STREAM_XORBS:
                log.info("upload stream broken: xorb number %d arrived when %d was missing", seq, missing)
                stream.broken = True
                stream.waiting.clear()
                return
            inline = held is not None and seq == expected and not stream.hashing
            if not inline:
                stream.waiting[seq] = xorb_hash
                if stream.hashing or expected not in stream.waiting:
                    return
            stream.hashing = True
        if inline:
            assert held is not None
            self._hash(stream, xorb_hash, lambda _: held)
        self._pool.submit(self._hash_waiting, stream)

    def _hash(self, stream: _Stream, xorb: bytes, content: XorbContent) -> None:
        """Add one xorb's content to the digest (the caller holds the stream's `hashing`)."""
        try:
            for piece in content(xorb):
                for chunk in piece:
                    stream.digest.update(chunk)
        except Exception as exc:  # noqa: BLE001 - the shortcut is lost, nothing else
            log.warning("upload stream broken: reading xorb back failed (%s)", exc)
            with stream.changed:
                stream.broken = True
                stream.waiting.clear()
            return
        with stream.changed:
            stream.hashed.append(xorb)

    def _hash_waiting(self, stream: _Stream) -> None:
        """Hash the stream's next xorbs while they are stored; then let prefix() read it."""
        while True:
            with stream.changed:
                xorb = None if stream.broken else stream.waiting.pop(len(stream.hashed), None)
                if xorb is None:
                    stream.hashing = False
                    stream.changed.notify_all()
                    return
            self._hash(stream, xorb, self._content)

    def prefix(self, key: str) -> Sha256Prefix | None:
        """What stream `key` has hashed so far (after waiting for xorbs already stored), and
        forget it: a shard ends its stream. None when there is nothing usable."""
        stream = self._stream(key, create=False)
        if stream is None:
            return None
        with self._lock:
            self._streams.pop(key, None)
        with stream.changed:
            if not stream.changed.wait_for(lambda: not stream.hashing, timeout=PREFIX_WAIT_SECONDS):
                return None
            if stream.broken or not stream.hashed:
                return None
            return Sha256Prefix(tuple(stream.hashed), stream.digest.copy())
