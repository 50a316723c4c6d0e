"""Hostile input for every parser, on both sides of the wire.

Each parser must either accept its input or raise its own typed error: FormatError for the
protocol core, ProtocolError for git-lfs lines, TransferError for server answers. Never
another exception, never a hang (hypothesis deadlines), never an allocation sized by a
hostile header. Inputs are random bytes and mutations of valid objects (byte flips,
truncations, insertions), so the parsers get past their first checks.
"""

from __future__ import annotations

import json
import random
import tracemalloc
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from git_xet.agent import protocol
from git_xet.client.errors import TransferError
from git_xet.client.http_backend import HttpCasBackend
from git_xet.core import compression, xorb
from git_xet.core.errors import FormatError
from git_xet.core.hashes import hash_to_hex
from git_xet.core.http_headers import bearer
from git_xet.core.reconstruction import FetchRange, Reconstruction, Term
from git_xet.core.shard import CasInfo, FileInfo, FileTerm, Shard, parse_shard, serialize_shard
from git_xet.storage.cas_store import CasStore
from tests.support.datagen import random_bytes
from tests.support.objects import single_xorb
from tests.support.server_process import RunningServer, running_server

FUZZ = settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _sample_objects() -> tuple[bytes, bytes, bytes, bytes]:
    """A footerless xorb, the same with footer, an upload shard and a stored shard."""
    data = random_bytes(200_000, 1) + bytes(100_000)  # raw and compressed chunks both
    built, digest = single_xorb(data)
    cas = CasInfo.from_chunks(built.xorb_hash, built.chunk_hashes, built.chunk_sizes, len(built.body))
    info = FileInfo(digest.file_hash, (FileTerm(built.xorb_hash, len(data), 0, len(built.chunk_hashes)),), (bytes(32),), bytes(32))
    shard = Shard((info,), (cas,))
    return bytes(built.body), built.with_footer(), serialize_shard(shard, with_footer=False), serialize_shard(shard, with_footer=True, now=1_700_000_000)


XORB, XORB_WITH_FOOTER, SHARD, STORED_SHARD = _sample_objects()


@st.composite
def mutated(draw, original: bytes) -> bytes:
    data = bytearray(original)
    for _ in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["flip", "cut", "insert", "overwrite_u32"]))
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "cut":
            del data[at : at + draw(st.integers(1, 5000))]
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        else:  # a length or count field set to something hostile
            data[at : at + 4] = draw(st.sampled_from([0, 1, 0x7FFFFFFF, 0xFFFFFFFF, len(data)])).to_bytes(4, "little")
    return bytes(data)


def _only_format_errors(fn, data) -> None:
    try:
        fn(data)
    except FormatError:
        pass


# ------------------------------------------------------------------ protocol core (both sides)


@FUZZ
@given(st.one_of(st.binary(max_size=4000), mutated(XORB), mutated(XORB_WITH_FOOTER)))
def test_xorb_parsers_raise_only_format_errors(data: bytes) -> None:
    _only_format_errors(xorb.parse_xorb, data)
    _only_format_errors(xorb.parse_chunk_records, data)
    _only_format_errors(xorb.verify_xorb, data)


@FUZZ
@given(st.one_of(st.binary(max_size=4000), mutated(SHARD), mutated(STORED_SHARD)))
def test_shard_parser_raises_only_format_errors(data: bytes) -> None:
    _only_format_errors(parse_shard, data)


@FUZZ
@given(st.binary(max_size=3000), st.sampled_from([0, 1, 2, 3, 255]), st.integers(-5, 200_000))
def test_chunk_decoder_raises_only_format_errors_and_stays_within_the_declared_size(payload: bytes, scheme: int, size: int) -> None:
    try:
        out = compression.decompress(payload, scheme, size)
    except FormatError:
        return
    assert len(out) == size


_json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), st.text(max_size=70)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=30), inner, max_size=5)),
    max_leaves=30,
)


def _valid_reconstruction(version: int) -> dict:
    h = "ab" * 32
    plan = Reconstruction(0, (Term(h, 0, 3, 1000),), (FetchRange(h, 0, 3, 0, 1099, "http://127.0.0.1/x"),))
    return plan.to_json(version)


@st.composite
def mutated_json(draw, original: object) -> object:
    """Replace one node anywhere in the JSON tree with an arbitrary JSON value."""
    if isinstance(original, dict) and original and draw(st.booleans()):
        key = draw(st.sampled_from(sorted(original)))
        return {**original, key: draw(mutated_json(original[key]))}
    if isinstance(original, list) and original and draw(st.booleans()):
        at = draw(st.integers(0, len(original) - 1))
        return [*original[:at], draw(mutated_json(original[at])), *original[at + 1 :]]
    return draw(_json_values)


@FUZZ
@given(st.one_of(_json_values, mutated_json(_valid_reconstruction(1)), mutated_json(_valid_reconstruction(2))))
def test_reconstruction_json_raises_only_format_errors(body: object) -> None:
    _only_format_errors(Reconstruction.from_json, body)


def test_hostile_counts_do_not_allocate_what_they_declare() -> None:
    """Every u32 of each object set to 0xFFFFFFFF in turn: parsing stays within a few MiB."""
    tracemalloc.start()
    try:
        for original, parse in ((XORB_WITH_FOOTER, xorb.parse_xorb), (STORED_SHARD, parse_shard), (SHARD, parse_shard)):
            for at in range(0, len(original) - 4, 4 if len(original) < 4000 else 64):
                data = original[:at] + b"\xff\xff\xff\xff" + original[at + 4 :]
                tracemalloc.reset_peak()
                _only_format_errors(parse, data)
                assert tracemalloc.get_traced_memory()[1] < 8 * len(original) + (4 << 20), at
    finally:
        tracemalloc.stop()


# ------------------------------------------------------------------ git-lfs lines (agent side)


_fields = st.dictionaries(
    st.sampled_from(["event", "oid", "size", "path", "action", "operation", "remote", "concurrenttransfers", "x"]),
    st.one_of(st.sampled_from(["init", "upload", "download", "terminate", "ab" * 32, "AB" * 32, "../x"]), _json_values),
    max_size=6,
)


@settings(max_examples=1000, deadline=500)
@given(st.one_of(st.text(max_size=200), _fields.map(json.dumps)))
def test_lfs_request_parser_raises_only_protocol_errors(line: str) -> None:
    try:
        request = protocol.parse_request(line)
    except protocol.ProtocolError:
        return
    if isinstance(request, protocol.Transfer):
        assert len(request.oid) == 64 and isinstance(request.size, int) and request.size >= 0


# ------------------------------------------------------------------ server answers (client side)


_frames = st.fixed_dictionaries(
    {"type": st.sampled_from(["validating", "committing", "result", "error", "other"])},
    optional={"result": _json_values, "message": _json_values, "retryable": _json_values},
)


@settings(max_examples=500, deadline=500)
@given(st.one_of(st.text(max_size=300), st.lists(st.one_of(_frames, _json_values).map(json.dumps), max_size=4).map("\n".join)))
def test_shard_upload_frames_raise_only_transfer_errors(text: str) -> None:
    try:
        HttpCasBackend._read_shard_frames(text)
    except TransferError:
        pass


# ------------------------------------------------------------------ client bodies (server side)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> RunningServer:
    with running_server(tmp_path_factory.mktemp("fuzz") / "data") as srv:
        yield srv


def _row_counts(data_dir: Path) -> dict[str, int]:
    store = CasStore(data_dir)
    try:
        return store.stats()
    finally:
        store.close()


@settings(max_examples=150, deadline=10_000, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    st.sampled_from(["xorb", "xorb_named_right", "shard_v1", "shard_v2", "batch"]),
    st.one_of(st.binary(max_size=3000), mutated(XORB), mutated(SHARD), _fields.map(lambda d: json.dumps(d).encode())),
)
def test_server_refuses_hostile_bodies_cleanly(fuzz_server: RunningServer, route: str, body: bytes) -> None:
    srv = fuzz_server
    token = _write_token(srv)
    before = _row_counts(srv.data_dir)
    target = {
        "xorb": f"/v1/xorbs/default/{'cd' * 32}",
        "xorb_named_right": f"/v1/xorbs/default/{hash_to_hex(xorb.verify_xorb(XORB).xorb_hash)}",
        "shard_v1": "/v1/shards",
        "shard_v2": "/v2/shards",
        "batch": "/fuzz.git/info/lfs/objects/batch",
    }[route]
    resp = httpx.post(srv.url + target, content=body, headers=bearer(token), timeout=60)
    assert resp.status_code < 500, (route, resp.status_code, resp.text[:300])
    if route == "xorb_named_right" and resp.status_code == 200 and resp.json()["was_inserted"]:
        assert xorb.verify_xorb(body).xorb_hash == xorb.verify_xorb(XORB).xorb_hash
        return  # the one way to store something: the real xorb under its real name
    if route == "shard_v2":
        assert '"type": "error"' in resp.text or '"type":"error"' in resp.text or resp.status_code >= 400, resp.text[:300]
    assert _row_counts(srv.data_dir) == before, route


_tokens: dict[str, str] = {}


def _write_token(srv: RunningServer) -> str:
    if srv.url not in _tokens:
        _tokens[srv.url] = srv.token("write")
    return _tokens[srv.url]


def test_mutation_strategy_reaches_past_the_first_checks() -> None:
    """The mutations must produce inputs the parsers accept sometimes, or they test little."""
    rng = random.Random(5)
    accepted = 0
    for _ in range(300):
        data = bytearray(STORED_SHARD)
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
        try:
            parse_shard(bytes(data))
            accepted += 1
        except FormatError:
            pass
    assert accepted > 0
