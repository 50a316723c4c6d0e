"""Downloaded xorb ranges land in recycled maps (memory.WindowPool), never while in use."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from git_xet.client.http_backend import HttpCasBackend
from git_xet.client.tokens import StaticToken
from git_xet.core.constants import MAX_XORB_BYTES
from git_xet.platform.memory import WindowPool, xorb_range_windows
from git_xet.pipelines.download import download_to_path
from git_xet.pipelines.upload import Uploader
from tests.support.datagen import random_bytes
from tests.support.server_process import running_server


def test_a_window_is_reused_only_once_nothing_looks_into_it() -> None:
    pool = WindowPool(1 << 20, max_spare=1)
    first = pool.take(1000)
    first[:5] = b"hello"
    chunk = first[1:3]  # a decoded raw chunk is such a view
    assert not pool.give_back(first)  # a live view: the map must not be handed out again
    second = pool.take(10)
    assert pool.maps_made == 2 and bytes(chunk) == b"el"
    del chunk
    assert pool.give_back(second)
    third = pool.take(4096)
    assert pool.maps_made == 2 and len(third) == 4096
    fourth = pool.take(1 << 20)
    assert pool.give_back(third) and not pool.give_back(fourth)  # at most max_spare kept
    with pytest.raises(ValueError):
        pool.take((1 << 20) + 1)
    assert not pool.give_back(memoryview(bytearray(10)))  # not one of the pool's maps


def test_repeated_downloads_reuse_their_windows(tmp_path: Path) -> None:
    data = random_bytes(MAX_XORB_BYTES + 20_000_000, 5)  # two xorbs: two pooled ranges
    with running_server(tmp_path / "data") as srv:
        backend = HttpCasBackend(srv.url, StaticToken(srv.token("write")))
        with Uploader(backend) as up:
            result = up.add_bytes(data)
            up.finalize()
        made = []
        for k in range(3):
            dest = tmp_path / f"out-{k}"
            download_to_path(backend, result.file_hex, dest, size=len(data), sha256_hex=result.sha256_hex)
            assert hashlib.sha256(dest.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
            made.append(xorb_range_windows().maps_made)
    # The first download creates its maps; the later ones mostly find them among the spares.
    # Not always all: a fetch may start before the hash thread has given the previous window
    # back (timing), so the count is bounded, not exact. Without recycling the two later
    # downloads would create as many maps again each.
    assert made[0] >= 1
    assert made[2] - made[0] < made[0], f"maps created per download: {made}"
