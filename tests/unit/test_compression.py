"""Compression schemes, the BG4 predictor and bounded decoding."""

import lz4.frame
import pytest
from hypothesis import given
from hypothesis import strategies as st

from git_xet.core import compression as comp
from git_xet.core.errors import FormatError
from tests.support.datagen import float32_like, random_bytes


def test_bg4_spec_example() -> None:
    assert list(comp.bg4_split(bytes(range(10)))) == [0, 4, 8, 1, 5, 9, 2, 6, 3, 7]
    assert comp.bg4_join(bytes([0, 4, 8, 1, 5, 9, 2, 6, 3, 7]), 10) == bytes(range(10))


@given(st.binary(max_size=5000))
def test_bg4_round_trip(data: bytes) -> None:
    assert comp.bg4_join(comp.bg4_split(data), len(data)) == data


@given(st.binary(min_size=1, max_size=131072), st.sampled_from(list(comp.CompressionScheme)))
def test_scheme_round_trip(data: bytes, scheme: comp.CompressionScheme) -> None:
    payload = comp.compress(data, scheme)
    assert comp.decompress(payload, scheme, len(data)) == data
    chosen, packed = comp.compress_chunk(data, scheme)
    assert comp.decompress(packed, chosen, len(data)) == data
    assert len(packed) <= len(data)


def test_lz4_payload_is_frame_format() -> None:
    assert comp.compress(bytes(1000), comp.CompressionScheme.LZ4)[:4] == b"\x04\x22\x4d\x18"


def test_incompressible_chunk_is_stored_raw() -> None:
    data = random_bytes(65536, 1)
    assert comp.compress_chunk(data, comp.CompressionScheme.LZ4) == (comp.CompressionScheme.NONE, data)


def test_decompression_bomb_is_bounded() -> None:
    bomb = lz4.frame.compress(bytes(50 * 1024 * 1024))
    with pytest.raises(FormatError):
        comp.decompress(bomb, comp.CompressionScheme.LZ4, 1000)
    with pytest.raises(FormatError):
        comp.decompress(bomb, comp.CompressionScheme.LZ4, 200_000)  # above MAX_CHUNK_SIZE


def test_corrupt_and_short_frames_are_rejected() -> None:
    payload = bytearray(comp.compress(b"hello world" * 100, comp.CompressionScheme.LZ4))
    with pytest.raises(FormatError):
        comp.decompress(bytes(payload[:-6]), comp.CompressionScheme.LZ4, 1100)
    payload[10] ^= 0xFF
    with pytest.raises(FormatError):
        comp.decompress(bytes(payload), comp.CompressionScheme.LZ4, 1100)
    with pytest.raises(FormatError):
        comp.decompress(b"\x00" * 20, comp.CompressionScheme.LZ4, 20)
    with pytest.raises(FormatError):
        comp.decompress(b"abc", comp.CompressionScheme.NONE, 4)
    with pytest.raises(FormatError):
        comp.decompress(b"abc", 7, 3)


def test_predictor_prefers_bg4_for_float_data_and_lz4_for_random() -> None:
    floats = float32_like(65536, 3)
    assert comp.predict_scheme(floats) is comp.CompressionScheme.BG4_LZ4
    assert comp.predict_scheme(random_bytes(65536, 3)) is comp.CompressionScheme.LZ4
    # And the prediction is right for that data: grouping compresses float weights better.
    assert len(comp.compress(floats, comp.CompressionScheme.BG4_LZ4)) < len(comp.compress(floats, comp.CompressionScheme.LZ4))
