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

Shared by the processes of one data directory: with `--workers N` a client's parallel
uploads land in different processes, so a stream lives in a file of `<data>/upload-streams/`
(its state: how many xorbs are hashed, the digest's saved state (sha256_state), the xorbs
waiting for their predecessors, which process is hashing) followed by the hashed xorbs' names.
Each step reads and rewrites it under `flock`, which also orders the threads of one process;
hashing itself runs outside the lock, by one holder at a time (`hashing`: its process id).

Why it is sound: the digest is ours, computed from what the store holds under those xorb
hashes, in the order the stream lists them; a file that begins with those whole xorbs begins
with exactly that content. A client that numbers wrongly, or a stream that breaks (a gap
too large, a repeat, a holder that died, a restart), costs the shortcut, never correctness:
registration then reads the file as before. Without a resumable sha256 (sha256_state) there
are no streams at all.

Why it is bounded: streams are keyed by the token's identity and repo and the client's id
(one client cannot touch another's); at most MAX_STREAMS of them per data directory, dropped
oldest first and after IDLE_SECONDS unused; at most MAX_STREAM_XORBS xorbs each, none more
than MAX_AHEAD places past the first missing one, and MAX_WAITING waiting to be hashed. A
xorb is hashed only when a request stored it (its body arrived, and was verified), at most
once: the work is at most one sha256 pass over bytes the server received anyway. A step's
file work is constant: a header of HEADER_BYTES, and one name appended.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from ..storage.cas_store import Sha256Prefix
from . import sha256_state
from .sha256_state import ResumableSha256

log = logging.getLogger("git_xet.server")

MAX_STREAMS = 64
MAX_STREAM_XORBS = 16384  # 1 TiB of 64 MiB xorbs: 512 KiB of xorb hashes at most per stream
MAX_AHEAD = 8  # how far past the first missing xorb one may arrive (clients upload a few at once)
MAX_WAITING = 32  # xorbs stored and not hashed yet (hashing keeps up with a client's uploads)
IDLE_SECONDS = 600.0
PREFIX_WAIT_SECONDS = 60.0  # how long a shard waits for the hashing of xorbs already stored
HASHING_THREADS = 2
HEADER_BYTES = 4096  # a stream file's state (JSON, padded); the hashed xorbs' names follow
NAME_BYTES = 32
DIRECTORY = "upload-streams"

# A xorb's decoded content, a list of chunks per piece (CasStore.xorb_pieces).
XorbContent = Callable[[bytes], Iterable[list[bytes | memoryview]]]


class StreamRef(NamedTuple):
    """What a request says of its upload stream: the registry key, and the xorb's number (None
    on a shard)."""

    key: str
    seq: int | None


def stream_key(owner: str, repo: str, stream_id: str) -> str:
    """The registry key of a client's stream: its token's identity and repo, and its id.
    Derived (not the parts themselves) so that it may travel in a signed grant URL, and name
    the stream's file."""
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


@dataclass
class _State:
    """A stream file's header."""

    hashed: int = 0  # xorbs in the digest (their names follow the header, in order)
    digest: bytes = field(default_factory=lambda: ResumableSha256().state)
    waiting: dict[int, bytes] = field(default_factory=dict)  # seq -> xorb stored, not hashed yet
    broken: bool = False
    hashing: int | None = None  # the process hashing the stream's next xorbs
    used: float = 0.0  # when a request last named it (time.time())

    def encode(self) -> bytes:
        header = json.dumps(
            {
                "hashed": self.hashed, "digest": self.digest.hex(), "waiting": {str(s): x.hex() for s, x in self.waiting.items()},
                "broken": self.broken, "hashing": self.hashing, "used": self.used,
            }
        ).encode()  # fmt: skip
        assert len(header) <= HEADER_BYTES, "MAX_WAITING bounds the header (test_the_largest_state_fits_its_header)"
        return header.ljust(HEADER_BYTES)

    def break_off(self) -> None:
        """The stream is of no more use: nothing waits, nobody hashes."""
        self.broken, self.hashing = True, None
        self.waiting.clear()

    @classmethod
    def decode(cls, raw: bytes) -> _State:
        fields = json.loads(raw)
        waiting = {int(s): bytes.fromhex(x) for s, x in fields["waiting"].items()}
        return cls(fields["hashed"], bytes.fromhex(fields["digest"]), waiting, fields["broken"], fields["hashing"], fields["used"])


class _Open(NamedTuple):
    fd: int
    state: _State


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive, and not ours
        return True
    return True


class UploadStreams:
    """The streams of one data directory (see the module's docstring)."""

    def __init__(self, content: XorbContent, data_dir: Path) -> None:
        self._content = content
        self.enabled = sha256_state.available()
        self._dir = Path(data_dir) / DIRECTORY
        if self.enabled:
            self._dir.mkdir(mode=0o700, exist_ok=True)
        self._pool = ThreadPoolExecutor(HASHING_THREADS, thread_name_prefix="git-xet-upload-stream")

    def _path(self, key: str) -> Path:
        if len(key) != 32 or not all(c in "0123456789abcdef" for c in key):
            raise ValueError("a stream key is 32 hex digits (stream_key)")
        return self._dir / key

    @contextlib.contextmanager
    def _locked(self, key: str, create: bool) -> Iterator[_Open | None]:
        """The stream's file, locked, with its state (None if there is no such stream). Changes
        to the state are written back by _save, under the same lock."""
        path = self._path(key)
        while True:
            try:
                fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
            except FileNotFoundError:
                yield None
                return
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    same = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
                if not same:  # ended (or swept) while we waited for the lock: open it anew
                    continue
                raw = os.pread(fd, HEADER_BYTES, 0)
                if raw:
                    state = _State.decode(raw)
                elif create:
                    state = _State()
                    self._sweep(keep=path.name)
                else:
                    state = None
                yield None if state is None else _Open(fd, state)
                return
            finally:
                os.close(fd)  # closing also releases the lock

    @staticmethod
    def _save(opened: _Open, appended: bytes = b"") -> None:
        if appended:
            os.pwrite(opened.fd, appended, HEADER_BYTES + NAME_BYTES * (opened.state.hashed - 1))
        os.pwrite(opened.fd, opened.state.encode(), 0)

    def _sweep(self, keep: str) -> None:
        """Drop idle streams, then the oldest while there are MAX_STREAMS or more (a new one,
        `keep`, is about to be added)."""
        now = time.time()
        streams = []
        for entry in os.scandir(self._dir):
            if entry.name == keep:
                continue
            try:
                with open(entry.path, "rb") as f:
                    used = _State.decode(f.read(HEADER_BYTES)).used
            except (OSError, ValueError, KeyError, TypeError):  # being created, or damaged: by its age on disk
                try:
                    used = entry.stat().st_mtime
                except FileNotFoundError:
                    continue
            streams.append((used, entry.path))
        streams.sort()
        drop = [p for used, p in streams if now - used > IDLE_SECONDS]
        kept = [p for used, p in streams if now - used <= IDLE_SECONDS]
        drop += kept[: max(0, len(kept) - MAX_STREAMS + 1)]
        for path in drop:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def stored(self, key: str, seq: int, xorb_hash: bytes, held: Iterable[list[bytes | memoryview]] | None = None) -> None:
        """A request stored xorb `xorb_hash` as number `seq` of stream `key`: hash it once its
        predecessors are. `held`: its content while the request still holds it in memory;
        when the xorb is next in line it is hashed from there, in the caller's thread, before
        this returns (a 64 MiB xorb: ~50 ms of sha256, instead of reading it back later).
        Anything else is hashed in a thread of ours, read back from the store, by whichever
        process stored the xorb its predecessor waited for."""
        if not self.enabled:
            return
        with self._locked(key, create=True) as opened:
            assert opened is not None
            state = opened.state
            if state.broken:
                return
            state.used = time.time()  # what the sweep goes by: a request's last word, not our hashing
            expected = state.hashed
            missing = expected  # the first number not arrived yet (the ones before it wait for hashing only)
            while missing in state.waiting:
                missing += 1
            inline = held is not None and seq == expected and state.hashing is None
            if seq < expected or seq in state.waiting or seq >= missing + MAX_AHEAD or seq >= MAX_STREAM_XORBS or len(state.waiting) >= MAX_WAITING:
                log.info("upload stream broken: xorb number %d arrived when %d was missing and %d waited", seq, missing, len(state.waiting))
                state.break_off()
                self._save(opened)
                return
            state.waiting[seq] = xorb_hash  # the one being hashed too, until it is: it has arrived
            if not inline and (state.hashing is not None or expected not in state.waiting):
                self._save(opened)
                return
            state.hashing = os.getpid()
            self._save(opened)
            digest = state.digest
        if inline:
            assert held is not None
            if not self._hash(key, digest, xorb_hash, lambda _: held):
                return
        self._pool.submit(self._hash_waiting, key)

    def _hash(self, key: str, digest: bytes, xorb: bytes, content: XorbContent) -> bool:
        """Add one xorb's content to the stream's digest (the caller is its holder): True if
        the stream goes on, False if it broke or ended meanwhile."""
        running = ResumableSha256.from_state(digest)
        try:
            for piece in content(xorb):
                for chunk in piece:
                    running.update(chunk)
        except Exception as exc:  # noqa: BLE001 - the shortcut is lost, nothing else
            log.warning("upload stream broken: reading xorb back failed (%s)", exc)
            with self._locked(key, create=False) as opened:
                if opened is not None:
                    opened.state.break_off()
                    self._save(opened)
            return False
        with self._locked(key, create=False) as opened:
            if opened is None:
                return False  # its shard came and gave up waiting
            state = opened.state
            if state.broken:  # break_off() let go of the holder already
                return False
            del state.waiting[state.hashed]
            state.digest = running.state
            state.hashed += 1
            self._save(opened, appended=xorb)
        return True

    def _hash_waiting(self, key: str) -> None:
        """Hash the stream's next xorbs while they are stored; then let prefix() read it."""
        while True:
            with self._locked(key, create=False) as opened:
                if opened is None:
                    return
                state = opened.state
                xorb = None if state.broken else state.waiting.get(state.hashed)
                if xorb is None:
                    state.hashing = None
                    self._save(opened)
                    return
                digest = state.digest
            if not self._hash(key, digest, xorb, self._content):
                return

    def prefix(self, key: str) -> Sha256Prefix | None:
        """What stream `key` has hashed so far (after waiting for xorbs already stored), and
        forget it: a shard ends its stream. None when there is nothing usable."""
        if not self.enabled:
            return None
        deadline = time.monotonic() + PREFIX_WAIT_SECONDS
        pause = 0.002
        while True:
            with self._locked(key, create=False) as opened:
                if opened is None:
                    return None
                state = opened.state
                holder = state.hashing
                if holder is None or (holder != os.getpid() and not _alive(holder)) or time.monotonic() > deadline:
                    os.unlink(self._path(key))  # under the lock: a waiter finds it gone and starts anew
                    if holder is not None or state.broken or not state.hashed:
                        return None
                    names = os.pread(opened.fd, NAME_BYTES * state.hashed, HEADER_BYTES)
                    xorbs = tuple(names[i : i + NAME_BYTES] for i in range(0, len(names), NAME_BYTES))
                    return Sha256Prefix(xorbs, ResumableSha256.from_state(state.digest))
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
