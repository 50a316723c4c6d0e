"""bench/bundle_batching.py sends what it says: every file, k to a bundle (the last one holding
the rest), each bundle one xorb and a shard whose files claim their own sha256."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core.shard import parse_shard
from git_xet.core.upload_bundle import parse_bundle

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import bundle_batching


@settings(max_examples=15)
@given(st.lists(st.binary(min_size=1, max_size=3000), min_size=1, max_size=9, unique=True), st.integers(1, 5))
def test_every_file_is_sent_once_k_to_a_bundle(files: list[bytes], k: int) -> None:
    sent = bundle_batching.bundles(files, k)
    assert len(sent) == -(-len(files) // k)
    for n, body in enumerate(sent):
        xorbs, shard_body = parse_bundle(body)
        shard = parse_shard(bytes(shard_body))  # (its files in the shard's own order)
        assert len(xorbs) == 1
        assert sorted(f.sha256 or b"" for f in shard.files) == sorted(hashlib.sha256(f).digest() for f in files[n * k : (n + 1) * k])
