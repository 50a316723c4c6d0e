"""What LZ4HC costs and saves per kind of data: bytes and compression CPU of each chunk's
encoding as the xorb builder picks it (core/compression.py), with LZ4HC and without it.

    python bench/lz4hc_cost.py [--mib 16] [--json OUT]

compress_chunk tries LZ4HC (level 3) on chunks that fast LZ4 shrinks below 75%: text, tables,
JSON. There it shrinks a chunk 20-30% more than fast LZ4, at about a fifth of its speed; on
weights, compressed Parquet and GGUF it rarely or never runs. An early bail-out ("use HC only
when it gains enough") does not help where the CPU goes: on text it always gains enough. The
judges of bytes against hf-xet (tests/integration/test_dedup_real_data.py,
test_compression_vs_hf_xet.py) pass without LZ4HC too: its bytes are a margin over hf-xet,
not what keeps git-xet at or under it.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import MIB, write_json

from git_xet.core import compression
from git_xet.core.xorb import CHUNKS_PER_COMPRESSION_DECISION
from git_xet.pipelines.file_hashing import hash_bytes


def python_sources(size: int) -> bytes:
    """The running Python's standard library sources, concatenated: code and prose."""
    out = bytearray()
    for path in sorted(Path(sysconfig.get_paths()["stdlib"]).rglob("*.py")):
        out += path.read_bytes()
        if len(out) >= size:
            break
    return bytes(out[:size])


def jsonl_events(size: int) -> bytes:
    """Event logs as JSON lines (the shape of many dataset files)."""
    rng = random.Random(3)
    out = bytearray()
    i = 0
    while len(out) < size:
        row = {"id": i, "user": f"user{rng.randint(0, 5000)}", "event": rng.choice(["click", "view", "buy"]), "ts": 1_700_000_000 + 7 * i, "score": round(rng.random(), 4)}
        out += json.dumps(row).encode() + b"\n"
        i += 1
    return bytes(out[:size])


def parquet(size: int) -> bytes:
    from tests.support.real_shaped import parquet_versions

    return parquet_versions(False, size / (11 * MIB), 12)[0].data


def bf16_weights(size: int) -> bytes:
    import numpy as np

    values = np.random.default_rng(1).standard_normal(size // 2, dtype=np.float32) * np.float32(0.02)
    return (values.view(np.uint32) >> 16).astype("<u2").tobytes()


KINDS: dict[str, Callable[[int], bytes]] = {"python source": python_sources, "JSON lines": jsonl_events, "Parquet": parquet, "bf16 weights": bf16_weights}


def encode(data: bytes, with_hc: bool) -> tuple[int, float, int]:
    """(encoded bytes, CPU seconds compressing, chunks LZ4HC ran on) for `data`'s chunks."""
    sizes = hash_bytes(data).chunk_sizes
    saved = compression.HC_TRY_BELOW
    compression.HC_TRY_BELOW = saved if with_hc else 0.0  # the one threshold compress_chunk reads
    total, seconds, hc_chunks, pos = 0, 0.0, 0, 0
    scheme = compression.CompressionScheme.LZ4
    try:
        for n, size in enumerate(sizes):
            chunk = data[pos : pos + size]
            pos += size
            started = time.process_time()
            if n % CHUNKS_PER_COMPRESSION_DECISION == 0:
                scheme = compression.predict_scheme(chunk)
            total += len(compression.compress_chunk(chunk, scheme)[1])
            seconds += time.process_time() - started
            if with_hc:  # (counted outside the timing)
                source = compression.bg4_split(chunk) if scheme is compression.CompressionScheme.BG4_LZ4 else chunk
                hc_chunks += len(compression.compress(source, compression.CompressionScheme.LZ4)) < saved * size
    finally:
        compression.HC_TRY_BELOW = saved
    return total, seconds, hc_chunks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=16, help="bytes of each kind of data")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"{'data':<15}{'MiB':>6}{'fast MiB':>10}{'+HC MiB':>9}{'HC saves':>10}{'fast MB/s':>11}{'+HC MB/s':>10}{'HC chunks':>11}")
    summary = {}
    for name, make in KINDS.items():
        data = make(args.mib * MIB)
        fast, fast_s, _ = encode(data, False)
        hc, hc_s, hc_chunks = encode(data, True)
        chunks = len(hash_bytes(data).chunk_sizes)
        summary[name] = {"bytes": len(data), "fast_bytes": fast, "hc_bytes": hc, "fast_cpu_s": fast_s, "hc_cpu_s": hc_s, "hc_chunks": hc_chunks, "chunks": chunks}
        print(
            f"{name:<15}{len(data) / MIB:>6.1f}{fast / MIB:>10.2f}{hc / MIB:>9.2f}{100 * (1 - hc / fast):>9.1f}%"
            f"{len(data) / fast_s / 1e6:>11.0f}{len(data) / hc_s / 1e6:>10.0f}{hc_chunks:>6}/{chunks}"
        )
    write_json(args.json, summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
