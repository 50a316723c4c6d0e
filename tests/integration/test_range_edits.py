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

from .test_hfjs_peer import REPO, _endpoint, _read_back, _write, _xet_hashes

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


cases_strategy = st.lists(st.tuples(st.booleans(), st.integers(0, 1500), st.integers(0, 2**32), st.booleans()), min_size=50, max_size=50)


@settings(max_examples=10)
@given(cases=cases_strategy)
def test_gap_summaries_are_byte_identical_to_huggingface_js(cases: list[tuple[bool, int, int, bool]]) -> None:
    """Runs of n chunks with random hashes (a natural cut every 4th on average) and sizes."""
    jobs = []
    ours = []
    for at_start, n, seed, at_end in cases:
        rng = random.Random(seed)
        chunks = [(rng.randbytes(32), rng.randint(1, 131072)) for _ in range(n)]
        jobs.append({"at_start": at_start, "at_end": at_end, "chunks": [[hashes.hash_to_hex(h), size] for h, size in chunks]})
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


def _edit(server: RunningServer, tmp_path: Path, name: str, base_hex: str, base: bytes, splices: list[tuple[int, bytes]]) -> tuple[str, dict]:
    """huggingface.js commits an "edit" of a stored file (inserts at offsets); returns the new
    file's hash and what the server saw meanwhile (requests, xorb bytes in, xorb bytes read)."""
    jobs = []
    for i, (at, data) in enumerate(splices):
        path = tmp_path / f"{name}.insert{i}"
        path.write_bytes(data)
        jobs.append([at, at, str(path)])
    new = bytearray(base)
    for at, data in sorted(splices, reverse=True):
        new[at:at] = data
    logged_before = len(server.requests())
    edit = hfjs_peer.run({"edit": [{"name": name, "hash": base_hex, "size": len(base), "splices": jobs}]}, _endpoint(server))
    assert edit.commit["lfs_files"] == [{"path": name, "algo": "sha256", "size": len(new), "oid": hashlib.sha256(bytes(new)).hexdigest()}]
    during = server.requests()[logged_before:]
    seen = {
        "asked": [r for r in edit.requests if r.startswith("GET /v2/file-chunk-hashes/")],
        "sent": sum(int(line["bytes_in"]) for line in during if line["path"].startswith("/v1/xorbs/")),
        "read": sum(int(line["bytes_out"]) for line in during if line["path"].startswith("/v1/xorb-data/")),
    }
    print(f"edit {name}: {len(base)} -> {len(new)} bytes; xorb bytes sent {seen['sent']}, read back {seen['read']}; range-edit answers {seen['asked']}")
    return _xet_hashes(server, {name: (edit.commit["lfs_files"][0]["oid"], len(new))})[name], seen


def _stored_bytes(server: RunningServer, file_hex: str) -> tuple[int, int]:
    """Stored (compressed) bytes of a file's xorb ranges: all of them, and its last term's."""
    plan = httpx.get(f"{server.url}/v1/reconstructions/{file_hex}", headers=bearer(server.token("read", repo=REPO)), timeout=30).json()
    ranges = [f["url_range"] for fs in plan["fetch_info"].values() for f in fs]
    last = plan["terms"][-1]
    last_ranges = [f["url_range"] for f in plan["fetch_info"][last["hash"]] if f["range"]["start"] <= last["range"]["start"] < f["range"]["end"]]
    return sum(r["end"] - r["start"] + 1 for r in ranges), sum(r["end"] - r["start"] + 1 for r in last_ranges)


def test_hfjs_range_edits_of_a_growing_csv_read_and_send_about_the_edit(server: RunningServer, tmp_path: Path) -> None:
    """A CSV that grows by appends (each a range edit), then gets rows inserted in the middle.
    huggingface.js snaps edits to whole terms of the stored file: with this route an append
    re-chunks only the file's last term (it still reads the whole file once, for its sha256);
    without it (a 404) it reads and re-chunks the whole file again."""
    versions = [csv_rows(0, 120_000, 61)]  # about 4.5 MB
    paths = _write(tmp_path, {"v0.csv": versions[0]})
    hexes = [hfjs_peer.direct_upload([paths["v0.csv"]], _endpoint(server)).direct[0]["xet_hash"]]
    seen = []
    for k in range(1, 4):
        rows = csv_rows(120_000 + 20_000 * (k - 1), 20_000, 61 + k)  # about 0.75 MB each
        file_hex, step = _edit(server, tmp_path, f"v{k}.csv", hexes[-1], versions[-1], [(len(versions[-1]), rows)])
        versions.append(versions[-1] + rows)
        hexes.append(file_hex)
        seen.append(step)
    middle = versions[-1].index(b"\n", len(versions[0]) // 2) + 1
    inserted = csv_rows(10_000_000, 50, 70)
    file_hex, step = _edit(server, tmp_path, "v4.csv", hexes[-1], versions[-1], [(middle, inserted)])
    versions.append(versions[-1][:middle] + inserted + versions[-1][middle:])
    hexes.append(file_hex)
    seen.append(step)

    for step in seen:
        assert step["asked"] and all(r.endswith(" 200") for r in step["asked"])
    # Sent: an append re-uploads the file's last term (huggingface.js re-chunks it and its dedup
    # asks only for 1 chunk in 1024) and its own rows; the same with or without this route.
    for k, step in enumerate(seen[:3], start=1):
        _, last = _stored_bytes(server, hexes[k - 1])
        assert step["sent"] <= last + len(versions[k]) - len(versions[k - 1]) + (64 << 10)
    # What an append reads back: the whole file once (huggingface.js needs its sha256, the Git LFS
    # oid) and the file's last term again to re-chunk it; without the route, the whole file twice.
    for k in (2, 3):
        whole, last = _stored_bytes(server, hexes[k - 1])
        print(f"append v{k}: read {seen[k - 1]['read']} bytes; the stored file is {whole} bytes, its last term {last}")
        assert seen[k - 1]["read"] <= whole + 2 * last
    assert seen[3]["sent"] < _stored_bytes(server, hexes[3])[0] // 2
    passed = _read_back(server, tmp_path, {"v4.csv": versions[-1], "v2.csv": versions[2]}, {"v4.csv": hexes[-1], "v2.csv": hexes[2]}, readers=("ours", "hf-xet"))
    assert passed == {"ours": 2, "hf-xet": 2}
