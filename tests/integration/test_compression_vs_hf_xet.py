"""On equal chunks, the xorbs git-xet uploads are no larger than hf-xet's (issue 41 §6).

hf-xet (PyPI) and our Uploader each store the same generated file in a store of their own:
the same chunks in the same xorbs (equal xorb hashes), and our xorb bodies, chunk headers
plus compressed payloads, take no more bytes than hf-xet's. Files are built from segments of
text, random bytes, float tensors and zeros in generated sizes and orders, so chunks of one
kind sit inside runs that started with another.

Byte identity is out of reach: hf-xet's LZ4 encoder is lz4_flex, ours liblz4, and the two pick
different matches. Where both only shave a few percent (byte-grouped float tensors), lz4_flex's
fast mode can be up to ~1% shorter than liblz4's and LZ4HC costs ten times the CPU there, so
those records (BG4 in hf-xet's xorb) get BG4_SLACK; every other record must be no longer.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.client.local_backend import LocalStoreBackend
from git_xet.client.shard_cache import ShardCache
from git_xet.core import xorb
from git_xet.pipelines.upload import Uploader
from git_xet.storage.objects import DirectoryObjectStore
from tests.support import hf_xet_oracle

pytest.importorskip("hf_xet", reason="hf-xet (the peer compared with) is a test dependency")

_WORDS = np.array(["the", "of", "a", "xet", "chunk", "table", "row", "value", "tensor", "weight", "model", "layer", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", ",", ";", "\n"])


def _segment(kind: str, size: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    if kind == "text":
        return " ".join(rng.choice(_WORDS, size // 3 + 1)).encode()[:size]
    if kind == "random":
        return rng.bytes(size)
    if kind == "float32":
        return (rng.standard_normal(size // 4 + 1, dtype=np.float32) * 0.02).tobytes()[:size]
    if kind == "bfloat16-like":  # the high halves of float32 weights: structured, barely compressible
        return (rng.standard_normal(size // 2 + 1, dtype=np.float32) * 0.02).view(np.uint16)[1::2].tobytes()[:size]
    return bytes(size)


_SEGMENTS = st.lists(
    st.tuples(st.sampled_from(["text", "random", "float32", "bfloat16-like", "zeros"]), st.integers(1, 600_000), st.integers(0, 2**32)),
    min_size=1,
    max_size=4,
)


BG4_SLACK = 0.015


def _body_bytes(blobs: list[bytes]) -> int:
    """Chunk headers plus payloads over all xorbs (footers aside: equal for equal chunks)."""
    return sum(xorb.parse_xorb(b).body_length for b in blobs)


def _bg4_bytes(blobs: list[bytes]) -> int:
    return sum(r.compressed_size for b in blobs for r in xorb.parse_xorb(b).records if r.scheme == 2)


def _ours(path: Path, root: Path) -> dict[str, bytes]:
    backend = LocalStoreBackend(root / "store")
    try:
        with Uploader(backend, ShardCache(root / "cache", backend.cache_key)) as up:
            up.add_file(path)
            up.finalize()
    finally:
        backend.close()
    objects = DirectoryObjectStore(root / "store")
    try:
        return {key.rsplit("/", 1)[-1]: bytes(objects.read(key)) for key, _ in objects.list("xorbs/")}
    finally:
        objects.close()


@settings(max_examples=15, suppress_health_check=[HealthCheck.too_slow])
@given(_SEGMENTS)
def test_xorbs_no_larger_than_hf_xet(segments: list[tuple[str, int, int]]) -> None:
    data = b"".join(_segment(kind, size, seed) for kind, size, seed in segments)
    with tempfile.TemporaryDirectory(prefix="compression-vs-hf-xet-") as tmp:
        root = Path(tmp)
        path = root / "file.bin"
        path.write_bytes(data)
        (theirs,) = hf_xet_oracle.upload_each([path], root / "hf-xet")
        ours = _ours(path, root / "git-xet")
    assert set(ours) == set(theirs.xorbs), "the same chunks must make the same xorbs"
    their_blobs = list(theirs.xorbs.values())
    allowed = _body_bytes(their_blobs) + BG4_SLACK * _bg4_bytes(their_blobs)
    assert _body_bytes(list(ours.values())) <= allowed
