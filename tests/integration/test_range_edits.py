"""Upstream's newer read API against the real server and the real peer: `?chunk_byte_sizes=true`
on reconstructions, and `GET /v2/file-chunk-hashes/{file}` with `X-Range-Dirty`, which
huggingface.js 2.17.5 asks before uploading an edit of a stored file (issue 41 §5).

The gap summaries are checked byte for byte against huggingface.js's own MerkleHashSubtree
(@huggingface/xetchunk-wasm, installed with the peer), and a range edit of a growing CSV goes
through the route, uploads about the edited chunks only, and reads back byte-exact with our
client and hf-xet.
"""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.core import hashes
from git_xet.core.merkle_subtree import MerkleSubtree
from git_xet.core.http_headers import bearer
from tests.support import hfjs_peer
from tests.support.datagen import random_bytes
from tests.support.server_process import RunningServer, running_server

from .test_hfjs_peer import REPO, _access_log, _endpoint, _read_back, _write, _xet_hashes

def _js_subtrees(cases: list[dict]) -> list[dict]:
    """huggingface.js's MerkleHashSubtree.fromChunks(...).toJSON() for each case."""
    hfjs_peer.installed_version()
    script = (
        "import { MerkleHashSubtree, hexToBytes } from '@huggingface/xetchunk-wasm';\n"
        "import { readFileSync } from 'node:fs';\n"
        "const cases = JSON.parse(readFileSync(0, 'utf8'));\n"
        "const out = cases.map((c) => MerkleHashSubtree.fromChunks(c.at_start, c.chunks.map(([h, n]) => ({ hash: hexToBytes(h), length: n })), c.at_end).toJSON());\n"
        "process.stdout.write(JSON.stringify(out));\n"
    )
    path = hfjs_peer.PACKAGE_DIR / "subtree_oracle.mjs"
    path.write_text(script)
    proc = subprocess.run(["node", str(path)], input=json.dumps(cases), capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


cases_strategy = st.lists(
    st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 2**32), st.integers(1, 131072)), max_size=300), st.booleans()),
    min_size=20,
    max_size=20,
)


@settings(max_examples=5)
@given(cases=cases_strategy)
def test_gap_summaries_are_byte_identical_to_huggingface_js(cases: list[tuple[bool, list[tuple[int, int]], bool]]) -> None:
    jobs = []
    ours = []
    for at_start, leaves, at_end in cases:
        chunks = [(hashlib.sha256(seed.to_bytes(8, "little")).digest(), size) for seed, size in leaves]
        jobs.append({"at_start": at_start, "at_end": at_end, "chunks": [[hashes.hash_to_hex(h), n] for h, n in chunks]})
        ours.append(MerkleSubtree.from_chunks(at_start, chunks, at_end).to_json())
    assert _js_subtrees(jobs) == ours


# ---------------------------------------------------------------- the server


@pytest.fixture
def server(tmp_path: Path):
    with running_server(tmp_path / "data") as srv:
        yield srv


def csv_rows(first: int, count: int, seed: int) -> bytes:
    rng = random.Random(seed)
    return b"".join(f"{i},{rng.getrandbits(48):x},{rng.random():.9f},{rng.choice(['alpha', 'beta', 'gamma'])}\n".encode() for i in range(first, first + count))


def test_chunk_byte_sizes_on_both_reconstruction_routes(server: RunningServer, tmp_path: Path) -> None:
    data = random_bytes(3 << 20, 51)
    paths = _write(tmp_path, {"f.bin": data})
    file_hex = hfjs_peer.direct_upload([paths["f.bin"]], _endpoint(server)).direct[0]["xet_hash"]
    headers = bearer(server.token("read", repo=REPO))
    for route in ("/v1/reconstructions/", "/v2/reconstructions/"):
        plain = httpx.get(f"{server.url}{route}{file_hex}?unknown=1", headers=headers, timeout=30).json()
        assert all("chunk_byte_sizes" not in t for t in plain["terms"])
        sized = httpx.get(f"{server.url}{route}{file_hex}?chunk_byte_sizes=true&unknown=1", headers={**headers, "Range": "bytes=1000-2000000"}, timeout=30).json()
        for term in sized["terms"]:
            assert len(term["chunk_byte_sizes"]) == term["range"]["end"] - term["range"]["start"]
            assert sum(term["chunk_byte_sizes"]) == term["unpacked_length"]
    # The sizes are huggingface.js's own chunk cuts of the file.
    whole = httpx.get(f"{server.url}/v1/reconstructions/{file_hex}?chunk_byte_sizes=true", headers=headers, timeout=30).json()
    assert [n for t in whole["terms"] for n in t["chunk_byte_sizes"]] == hfjs_peer.chunk_lengths([paths["f.bin"]])[str(paths["f.bin"])]


def test_file_chunk_hashes_is_scoped_like_every_read(server: RunningServer, tmp_path: Path) -> None:
    data = random_bytes(1 << 20, 52)
    paths = _write(tmp_path, {"f.bin": data})
    file_hex = hfjs_peer.direct_upload([paths["f.bin"]], _endpoint(server)).direct[0]["xet_hash"]
    url = f"{server.url}/v2/file-chunk-hashes/{file_hex}"
    dirty = {"X-Range-Dirty": "bytes=100-200"}
    own = httpx.get(url, headers={**bearer(server.token("read", repo=REPO)), **dirty}, timeout=30)
    assert own.status_code == 200 and own.json()["fileSize"] == len(data)
    other = httpx.get(url, headers={**bearer(server.token("read", repo="someone/else")), **dirty}, timeout=30)
    missing = httpx.get(url.replace(file_hex, "ab" * 32), headers={**bearer(server.token("read", repo=REPO)), **dirty}, timeout=30)
    assert other.status_code == missing.status_code == 404  # another repo's file is as absent as a missing one
    assert httpx.get(url, headers=dirty, timeout=30).status_code == 401
    no_header = httpx.get(url, headers=bearer(server.token("read", repo=REPO)), timeout=30)
    assert no_header.status_code == 400 and "X-Range-Dirty" in no_header.text


def test_hfjs_range_edit_of_a_growing_csv_uploads_about_the_edit(server: RunningServer, tmp_path: Path) -> None:
    base = csv_rows(0, 400_000, 61)  # about 16 MiB
    middle = len(base) // 2
    middle = base.index(b"\n", middle) + 1
    inserted = csv_rows(10_000_000, 50, 62)
    appended = csv_rows(400_000, 2_000, 63)
    edited = base[:middle] + inserted + base[middle:] + appended
    paths = _write(tmp_path, {"base.csv": base, "inserted": inserted, "appended": appended})
    first = hfjs_peer.direct_upload([paths["base.csv"]], _endpoint(server))
    base_hex = first.direct[0]["xet_hash"]
    logged_before = len(_access_log(server))

    splices = [[middle, middle, str(paths["inserted"])], [len(base), len(base), str(paths["appended"])]]
    edit = hfjs_peer.run({"edit": [{"name": "edited.csv", "hash": base_hex, "size": len(base), "splices": splices}]}, _endpoint(server))
    assert edit.commit["lfs_files"] == [{"path": "edited.csv", "algo": "sha256", "size": len(edited), "oid": hashlib.sha256(edited).hexdigest()}]
    asked = [r for r in edit.requests if r.startswith("GET /v2/file-chunk-hashes/")]
    assert asked and all(r.endswith(" 200") for r in asked), edit.requests

    during = _access_log(server)[logged_before:]
    sent = sum(int(line["bytes_in"]) for line in during if line["path"].startswith("/v1/xorbs/"))
    print(f"range edit of a {len(base)}-byte CSV (+{len(inserted)} in the middle, +{len(appended)} at the end): {sent} xorb bytes sent")
    assert sent < 2 << 20, f"{sent} bytes of xorbs for an edit of {len(inserted) + len(appended)} bytes"

    xet = _xet_hashes(server, {"edited.csv": (edit.commit["lfs_files"][0]["oid"], len(edited))})
    passed = _read_back(server, tmp_path, {"edited.csv": edited}, xet, readers=("ours", "hf-xet"))
    assert passed == {"ours": 1, "hf-xet": 1}
