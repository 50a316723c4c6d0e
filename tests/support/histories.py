"""Generated push histories for usage and deletion tests: blocks (one chunk each) packed into
xorbs, files made of chunk ranges of those xorbs, each file pushed into some repositories;
and the expected figures computed chunk by chunk from them, independently of storage/usage.py
(which sweeps ranges)."""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from hypothesis import strategies as st

from git_xet.core import hashes, shard, xorb
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes


@dataclass
class History:
    blocks: list[bytes]  # chunk contents
    xorbs: list[list[int]]  # block numbers per xorb
    files: list[list[tuple[int, int, int]]]  # (xorb number, chunk start, chunk end) per term
    repos_of: list[list[str]]  # repositories each file is pushed into
    built: list[xorb.VerifiedXorb] = field(default_factory=list)

    def content(self, n: int) -> bytes:
        return b"".join(self.blocks[self.xorbs[x][i]] for x, s, e in self.files[n] for i in range(s, e))

    def file_hex(self, n: int) -> str:
        ch = [self.built[x].chunk_hashes[i] for x, s, e in self.files[n] for i in range(s, e)]
        sizes = [len(self.blocks[self.xorbs[x][i]]) for x, s, e in self.files[n] for i in range(s, e)]
        return hashes.hash_to_hex(hashes.file_hash(ch, sizes))

    def oid(self, n: int) -> str:
        return hashlib.sha256(self.content(n)).hexdigest()


@st.composite
def histories(draw: st.DrawFn, repos: tuple[str, ...] = ("a", "b", "c")) -> History:
    n_blocks = draw(st.integers(2, 12))
    seed = draw(st.integers(0, 2**16))
    blocks = [random_bytes(draw(st.integers(1, 5000)), seed + i) for i in range(n_blocks)]
    cuts = sorted(set(draw(st.lists(st.integers(1, n_blocks - 1), max_size=3))))
    bounds = [0, *cuts, n_blocks]
    xorbs = [list(range(a, b)) for a, b in itertools.pairwise(bounds)]
    files = []
    for _ in range(draw(st.integers(1, 6))):
        terms = []
        for _ in range(draw(st.integers(1, 3))):
            x = draw(st.integers(0, len(xorbs) - 1))
            s = draw(st.integers(0, len(xorbs[x]) - 1))
            e = draw(st.integers(s + 1, len(xorbs[x])))
            terms.append((x, s, e))
        files.append(terms)
    repos_of = [draw(st.lists(st.sampled_from(repos), min_size=1, max_size=len(repos), unique=True)) for _ in files]
    return History(blocks, xorbs, files, repos_of)


def build(history: History) -> None:
    history.built = []
    for members in history.xorbs:
        builder = xorb.XorbBuilder()
        for b in members:
            builder.add(history.blocks[b], hashes.chunk_hash(history.blocks[b]))
        history.built.append(builder.build())


def xorb_object(built: xorb.VerifiedXorb) -> bytes:
    return bytes(built.body) + built.footer().serialize()


def push_shard(history: History, n: int) -> bytes:
    """The upload shard registering file n (its xorbs are stored already)."""
    terms, verification, cas = [], [], {}
    for x, s, e in history.files[n]:
        built = history.built[x]
        size = sum(len(history.blocks[history.xorbs[x][i]]) for i in range(s, e))
        terms.append(shard.FileTerm(built.xorb_hash, size, s, e))
        verification.append(hashes.verification_hash(built.chunk_hashes[s:e]))
        sizes = [len(history.blocks[b]) for b in history.xorbs[x]]
        cas[x] = shard.CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, sizes)
    info = shard.FileInfo(hashes.hex_to_hash(history.file_hex(n)), tuple(terms), tuple(verification), bytes.fromhex(history.oid(n)))
    return shard.serialize_shard(shard.Shard((info,), tuple(cas.values())), with_footer=False)


def push_all(store: CasStore, history: History) -> None:
    build(history)
    for built in history.built:
        store.put_xorb(hashes.hash_to_hex(built.xorb_hash), xorb_object(built))
    for n, repos in enumerate(history.repos_of):
        for repo in repos:
            store.register_shard(push_shard(history, n), repo, verify_sha256=True)


def expected_usage(history: History, live: set[tuple[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """Per repository: files, logical, unique and shared bytes, counted chunk by chunk; and
    reclaimable: stored bytes of the xorbs only it uses. `live`: the (repo, file) pairs still
    held (default: every push). Files with the same content count once per repository."""
    pairs = live if live is not None else {(r, n) for n, repos in enumerate(history.repos_of) for r in repos}
    by_repo: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    users: dict[tuple[int, int], set[str]] = defaultdict(set)
    seen: set[tuple[str, str]] = set()
    for repo, n in pairs:
        key = (repo, history.file_hex(n))
        if key in seen:
            continue
        seen.add(key)
        by_repo[repo]["files"] += 1
        by_repo[repo]["logical_bytes"] += len(history.content(n))
        for x, s, e in history.files[n]:
            for i in range(s, e):
                users[(x, i)].add(repo)
    xorb_users: dict[int, set[str]] = defaultdict(set)
    for (x, i), repos in users.items():
        xorb_users[x] |= repos
        size = len(history.blocks[history.xorbs[x][i]])
        for repo in repos:
            by_repo[repo]["unique_bytes" if len(repos) == 1 else "shared_bytes"] += size
    for x, repos in xorb_users.items():
        if len(repos) == 1:
            by_repo[next(iter(repos))]["reclaimable_bytes"] += len(xorb_object(history.built[x]))
    return {r: dict(Counter(v)) for r, v in by_repo.items()}
