"""The sha256 of a file, computed while its xorbs arrive instead of after its shard.

A shard claiming a file's sha256 (its Git LFS oid) is accepted only once the server has
computed that sha256 from the stored bytes. Done when the shard comes, that pass (~1 s per
GiB) is the whole end of an upload: the client has sent everything and waits for it. So our
client numbers the xorbs it uploads between two shards: `X-Git-Xet-Upload-Stream: <id> <seq>`
on each xorb upload (or its grant, or its commit), `X-Git-Xet-Upload-Stream: <id>` on the
shard (core/extension.py). Here each xorb that a request newly stored is hashed, in `seq` order, while the client
goes on uploading: from the request's buffer when it is next in line, else read back from the
store in a thread of this module's. The shard's registration then continues from that digest
(cas_store.Sha256Prefix) for a file that begins with those xorbs, whole.

Per process: a stream is an object in this process's memory, with its own hashlib sha256,
updated by one holder at a time and by nothing else. A stream that ends (its shard came, it
broke, it was dropped) is taken out of the registry first, under the lock; a holder still
hashing into it then finds it broken and its work is thrown away with it: no digest can land
in another stream, whatever other requests do meanwhile. With `--workers N` a client's xorbs
may land in several processes; each then hashes what it stored, and the shard's process uses
its own stream only if it begins the file (else the file is read whole, as without streams).

Why it is sound: the digest is ours, computed from what the store holds under those xorb
hashes, in the order the stream lists them; a file that begins with those whole xorbs begins
with exactly that content. A client that numbers wrongly, or a stream that breaks (a gap too
large, a repeat, a read that failed), costs the shortcut, never correctness: registration
then reads the file as before.

Why it is bounded, and nobody's but its writer's: streams are keyed by the writer (the
token's identity and repo) and the client's id, so one client cannot name another's stream.
Each writer has at most MAX_STREAMS_PER_WRITER, dropping its own oldest: no writer can drop
another's. A stream unused for IDLE_SECONDS is dropped. At most MAX_STREAM_XORBS xorbs each,
none more than MAX_AHEAD places past the first missing one, and MAX_WAITING waiting to be
hashed. A xorb is hashed only when a request stored it (its body arrived, and was verified),
at most once: the work is at most one sha256 pass over bytes the server received anyway. A
shard waits only for a hash that is running (its own stream's), never for read-backs queued
behind other writers' in the shared threads: those are dropped, and registration reads the
rest.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from ..storage.cas_store import Sha256Prefix

log = logging.getLogger("git_xet.server")

MAX_STREAMS_PER_WRITER = 16  # a writer's clients uploading at once (each agent has one stream)
MAX_STREAM_XORBS = 16384  # 1 TiB of 64 MiB xorbs: 512 KiB of xorb hashes at most per stream
MAX_AHEAD = 8  # how far past the first missing xorb one may arrive (clients upload a few at once)
MAX_WAITING = 32  # xorbs stored and not hashed yet (hashing keeps up with a client's uploads)
IDLE_SECONDS = 600.0
PREFIX_WAIT_SECONDS = 60.0  # how long a shard waits for its stream's running hash
HASHING_THREADS = 2

# A xorb's decoded content, a list of chunks per piece (CasStore.xorb_pieces).
XorbContent = Callable[[bytes], Iterable[list[bytes | memoryview]]]


class StreamRef(NamedTuple):
    """What a request says of its upload stream: its writer and key (see stream_ref), and the
    xorb's number (None on a shard)."""

    writer: str
    key: str
    seq: int | None

    def to_param(self) -> str:
        """As a signed grant URL carries it (from_param reads it back)."""
        return f"{self.writer}.{self.key}.{'' if self.seq is None else self.seq}"

    @classmethod
    def from_param(cls, value: str) -> StreamRef | None:
        writer, key, seq = [*value.split("."), "", "", ""][:3]
        if not writer or not key:
            return None
        return cls(writer, key, int(seq) if seq.isdigit() else None)


def stream_ref(owner: str, repo: str, stream_id: str, seq: int | None) -> StreamRef:
    """A client's stream: its writer (the token's identity and repo) and its id. Derived (not
    the parts themselves) so that it may travel in a signed grant URL."""
    writer = hashlib.sha256(f"{owner}\0{repo}".encode()).hexdigest()[:32]
    key = hashlib.sha256(f"{owner}\0{repo}\0{stream_id}".encode()).hexdigest()[:32]
    return StreamRef(writer, key, seq)


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


@dataclass(eq=False)
class _Stream:
    """One client's stream. `digest` and `xorbs` change only by its holder (`hashing` is
    "running"), the rest only under UploadStreams' lock."""

    used: float
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    xorbs: list[bytes] = field(default_factory=list)  # hashed into `digest`, in order
    waiting: dict[int, bytes] = field(default_factory=dict)  # seq -> xorb stored, not hashed yet
    hashing: Literal["queued", "running"] | None = None
    broken: bool = False

    def break_off(self) -> None:
        """The stream is of no more use: nothing waits, a holder's work is thrown away."""
        self.broken = True
        self.waiting.clear()


class UploadStreams:
    """The streams of this server process (see the module's docstring)."""

    def __init__(self, content: XorbContent) -> None:
        self._content = content
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a holder stopped running
        self._writers: dict[str, OrderedDict[str, _Stream]] = {}
        self._pool = ThreadPoolExecutor(HASHING_THREADS, thread_name_prefix="git-xet-upload-stream")

    def _sweep_idle(self, now: float) -> None:
        for writer, streams in list(self._writers.items()):
            while streams and now - next(iter(streams.values())).used > IDLE_SECONDS:
                streams.popitem(last=False)[1].break_off()
            if not streams:
                del self._writers[writer]

    def _open(self, ref: StreamRef, now: float) -> _Stream:
        """The stream `ref` names, made if new (dropping its writer's oldest beyond the cap)."""
        self._sweep_idle(now)
        streams = self._writers.setdefault(ref.writer, OrderedDict())
        stream = streams.get(ref.key)
        if stream is None:
            while len(streams) >= MAX_STREAMS_PER_WRITER:
                streams.popitem(last=False)[1].break_off()
            stream = streams[ref.key] = _Stream(used=now)
        streams.move_to_end(ref.key)
        stream.used = now
        return stream

    def _take(self, ref: StreamRef) -> _Stream | None:
        streams = self._writers.get(ref.writer)
        stream = None if streams is None else streams.pop(ref.key, None)
        if streams is not None and not streams:
            del self._writers[ref.writer]
        return stream

    def stored(self, ref: StreamRef, xorb_hash: bytes, held: Iterable[list[bytes | memoryview]] | None = None) -> None:
        """A request stored xorb `xorb_hash` as number `ref.seq` of its stream: hash it once
        its predecessors are. `held`: its content while the request still holds it in memory;
        when the xorb is next in line it is hashed from there, in the caller's thread, before
        this returns (a 64 MiB xorb: ~50 ms of sha256, instead of reading it back later).
        Anything else is hashed in a thread of ours, read back from the store."""
        seq = ref.seq
        if seq is None:
            return
        with self._lock:
            stream = self._open(ref, time.time())
            if stream.broken:
                return
            expected = len(stream.xorbs)
            missing = expected  # the first number not arrived yet (the ones before it wait for hashing only)
            while missing in stream.waiting:
                missing += 1
            if seq < expected or seq in stream.waiting or seq >= missing + MAX_AHEAD or seq >= MAX_STREAM_XORBS or len(stream.waiting) >= MAX_WAITING:
                log.info("upload stream broken: xorb number %d arrived when %d was missing and %d waited", seq, missing, len(stream.waiting))
                stream.break_off()
                return
            stream.waiting[seq] = xorb_hash  # the one being hashed too, until it is: it has arrived
            inline = held is not None and seq == expected and stream.hashing is None
            if not inline:
                if stream.hashing is None and expected in stream.waiting:
                    stream.hashing = "queued"
                    self._pool.submit(self._hash_waiting, stream)
                return
            stream.hashing = "running"
        assert held is not None
        if self._hash(stream, xorb_hash, lambda _: held):
            with self._lock:  # the rest waits its turn in our threads (a shard does not wait for it)
                stream.hashing = "queued"
                self._changed.notify_all()
            self._pool.submit(self._hash_waiting, stream)

    def _hash(self, stream: _Stream, xorb: bytes, content: XorbContent) -> bool:
        """Add one xorb's content to the stream's digest (the caller is its running holder):
        True if the stream goes on, False if it broke or ended meanwhile."""
        try:
            for piece in content(xorb):
                for chunk in piece:
                    stream.digest.update(chunk)
        except Exception as exc:  # noqa: BLE001 - the shortcut is lost, nothing else
            log.warning("upload stream broken: reading xorb back failed (%s)", exc)
            with self._lock:
                stream.break_off()
                stream.hashing = None
                self._changed.notify_all()
            return False
        with self._lock:
            if not stream.broken:
                del stream.waiting[len(stream.xorbs)]
                stream.xorbs.append(xorb)
                return True
            stream.hashing = None
            self._changed.notify_all()
            return False

    def _hash_waiting(self, stream: _Stream) -> None:
        """Hash the stream's next xorbs while they are stored; then let prefix() read it."""
        while True:
            with self._lock:
                xorb = None if stream.broken else stream.waiting.get(len(stream.xorbs))
                if xorb is None:
                    stream.hashing = None
                    self._changed.notify_all()
                    return
                stream.hashing = "running"
            if not self._hash(stream, xorb, self._content):
                return

    def prefix(self, ref: StreamRef) -> Sha256Prefix | None:
        """What stream `ref` has hashed so far (after waiting for a hash that is running),
        and end it: a shard ends its stream. None when there is nothing usable."""
        deadline = time.monotonic() + PREFIX_WAIT_SECONDS
        with self._lock:
            stream = self._take(ref)  # from now on a new xorb of this id starts a new stream
            if stream is None:
                return None
            while stream.hashing == "running" and not stream.broken:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._changed.wait(remaining)
            usable = not stream.broken and stream.hashing != "running" and stream.xorbs
            result = Sha256Prefix(tuple(stream.xorbs), stream.digest.copy()) if usable else None
            stream.break_off()  # a queued read-back finds it ended; a running one is thrown away
            return result
