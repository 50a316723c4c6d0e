"""Real-shaped data for dedup measurements, written by the libraries that write it in practice
(pyarrow, safetensors, gguf, numpy), from fixed seeds: the same bytes on every run.

Each dataset is a list of versions, pushed in order (`Version.name` says what changed). The
edits are the ones published dedup figures are about (docs/benchmarks.md):

- Parquet (`parquet_versions`): rows appended, inserted, deleted and updated, written with or
  without pyarrow's content-defined chunking (`use_content_defined_chunking`, pyarrow >= 21);
- a checkpoint sequence (`checkpoint_versions`, safetensors): one layer changed, every
  weight's low mantissa bits perturbed, a tensor inserted, the tensors reordered;
- a quantization family (`quantization_family`, GGUF): one model's weights at several
  quantizations, with the tensors llama.cpp's mixes keep at one type (norms in F32, the output
  projection at Q8_0, attn_v and ffn_down at Q8_0 in the "_M" mixes) shared between files.

`scale` sets the size: 1 gives test-sized files (a few MB, tensors of a few chunks), the
benchmark uses ~100 MB. These need the `bench` extra (pip install -e '.[bench]').
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Version:
    name: str
    data: bytes


# ------------------------------------------------------------------ Parquet


def _rows(rng: np.random.Generator, start: int, count: int):  # -> pyarrow.Table
    import pyarrow as pa

    import pyarrow.compute as pc

    ids = np.arange(start, start + count, dtype=np.int64)
    words = pa.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"])
    picked = [words.take(pa.array(rng.integers(0, len(words), count))) for _ in range(6)]
    text = pc.binary_join_element_wise(*picked, pc.cast(pa.array(ids), pa.string()), " ")
    return pa.table(
        {
            "id": ids,
            "user": rng.integers(0, 50_000, count, dtype=np.int64),
            "score": rng.standard_normal(count),
            "label": rng.integers(0, 10, count, dtype=np.int32),
            "text": text,
        }
    )


def _parquet(table, cdc: bool) -> bytes:  # table: pyarrow.Table
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(table, out, use_content_defined_chunking=cdc)
    return out.getvalue()


def parquet_versions(cdc: bool, scale: float = 1.0, seed: int = 1) -> list[Version]:
    """A table of rows, then each edit of it as the next version, each from the base table:
    base, append, insert, delete (3,000 rows, as in the published figure, or 3% of a smaller
    table), update (one row in a hundred, scattered, has its score changed)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    n = int(60_000 * scale)
    base = _rows(rng, 0, n)
    k = max(1, min(3000, n * 3 // 100))
    mid = n // 2
    extra = _rows(rng, n, k)
    appended = pa.concat_tables([base, extra])
    inserted = pa.concat_tables([base.slice(0, mid), extra, base.slice(mid)])
    deleted = pa.concat_tables([base.slice(0, mid), base.slice(mid + k)])
    picked = np.zeros(n, dtype=bool)
    picked[rng.choice(n, max(1, n // 100), replace=False)] = True
    updated = base.set_column(2, "score", pc.if_else(pa.array(picked), pc.multiply(base["score"], 2.0), base["score"]))
    tables = [("base", base), ("append", appended), ("insert", inserted), ("delete", deleted), ("update", updated)]
    return [Version(name, _parquet(table, cdc)) for name, table in tables]


# ------------------------------------------------------------------ checkpoints


def _model(rng: np.random.Generator, scale: float, layers: int) -> dict[str, np.ndarray]:
    """A transformer-shaped state dict in float32: embeddings, per-layer attention and MLP."""
    d = max(64, int(256 * scale**0.5) // 64 * 64)
    tensors = {"embed.weight": rng.standard_normal((4 * d, d), dtype=np.float32)}
    for i in range(layers):
        p = f"layers.{i}."
        for name in ("q", "k", "v", "o"):
            tensors[p + f"attn.{name}.weight"] = rng.standard_normal((d, d), dtype=np.float32)
        tensors[p + "mlp.up.weight"] = rng.standard_normal((2 * d, d), dtype=np.float32)
        tensors[p + "mlp.down.weight"] = rng.standard_normal((d, 2 * d), dtype=np.float32)
        tensors[p + "norm.weight"] = np.ones(d, dtype=np.float32)
    return tensors


def _safetensors(tensors: dict[str, np.ndarray]) -> bytes:
    from safetensors.numpy import save

    return save(tensors)


def _grouped_by_kind(name: str) -> str:
    """"layers.3.attn.q.weight" -> "attn.q.weight.layer03" (other names unchanged)."""
    if not name.startswith("layers."):
        return name
    _, layer, rest = name.split(".", 2)
    return f"{rest}.layer{int(layer):02d}"


def checkpoint_versions(scale: float = 1.0, seed: int = 2, layers: int = 12) -> list[Version]:
    """A checkpoint, then: one layer's weights changed; every weight's lowest 8 mantissa bits
    perturbed (a training step in low precision: every chunk changes); a tensor inserted; the
    tensors reordered (renamed by a converter to "attn.q.weight.layer03": safetensors writes
    tensors in name order, so each tensor moves on its own, grouped by kind, not by layer)."""
    rng = np.random.default_rng(seed)
    base = _model(rng, scale, layers)
    one_layer = dict(base)
    for name in [n for n in base if n.startswith(f"layers.{layers // 2}.")]:
        one_layer[name] = base[name] + rng.standard_normal(base[name].shape, dtype=np.float32) * 0.01
    low_bits = {}
    for name, t in base.items():
        noise = rng.integers(0, 256, t.shape, dtype=np.uint32)
        low_bits[name] = ((t.view(np.uint32) & ~np.uint32(0xFF)) | noise).view(np.float32)
    inserted = dict(base)
    d = base["embed.weight"].shape[1]
    inserted["layers.5.attn.gate.weight"] = rng.standard_normal((d, d), dtype=np.float32)
    reordered = {_grouped_by_kind(name): t for name, t in base.items()}
    return [
        Version("base", _safetensors(base)),
        Version("one layer changed", _safetensors(one_layer)),
        Version("low bits perturbed", _safetensors(low_bits)),
        Version("tensor inserted", _safetensors(inserted)),
        Version("tensors reordered", _safetensors(reordered)),
    ]


# ------------------------------------------------------------------ GGUF quantizations

# (name, base type, types of attn_v and ffn_down): the "_M" mixes keep those two at Q8_0.
QUANT_MIXES = (
    ("F16", "F16", "F16"),
    ("Q8_0", "Q8_0", "Q8_0"),
    ("Q5_1", "Q5_1", "Q5_1"),
    ("Q5_0_M", "Q5_0", "Q8_0"),
    ("Q5_0", "Q5_0", "Q5_0"),
    ("Q4_1", "Q4_1", "Q4_1"),
    ("Q4_0_M", "Q4_0", "Q8_0"),
    ("Q4_0", "Q4_0", "Q4_0"),
)


def _gguf(weights: dict[str, np.ndarray], mix: tuple[str, str, str]) -> bytes:
    import tempfile
    from pathlib import Path

    from gguf import GGMLQuantizationType, GGUFWriter, quants

    name, base_type, kept_type = mix
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.gguf"
        writer = GGUFWriter(path, "llama")
        writer.add_name("real-shaped")
        writer.add_string("general.quantization", name)
        for tensor_name, w in weights.items():
            if w.ndim == 1:
                kind = "F32"  # norms stay F32 in every llama.cpp quantization
            elif tensor_name == "output.weight":
                kind = "Q8_0"  # the output projection is kept at high precision
            elif tensor_name.endswith(("attn_v.weight", "ffn_down.weight")):
                kind = kept_type
            else:
                kind = base_type
            qtype = GGMLQuantizationType[kind]
            if kind == "F32":
                writer.add_tensor(tensor_name, w)
            elif kind == "F16":
                writer.add_tensor(tensor_name, w.astype(np.float16))
            else:
                writer.add_tensor(tensor_name, quants.quantize(w, qtype), raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        return path.read_bytes()


def quantization_family(scale: float = 1.0, seed: int = 3, layers: int = 8) -> list[Version]:
    """One model's weights as GGUF files at each of QUANT_MIXES."""
    rng = np.random.default_rng(seed)
    d = max(256, int(512 * scale**0.5) // 256 * 256)
    weights = {"token_embd.weight": rng.standard_normal((4 * d, d), dtype=np.float32)}
    for i in range(layers):
        p = f"blk.{i}."
        weights[p + "attn_norm.weight"] = rng.standard_normal(d, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            weights[p + f"{name}.weight"] = rng.standard_normal((d, d), dtype=np.float32)
        weights[p + "ffn_norm.weight"] = rng.standard_normal(d, dtype=np.float32)
        weights[p + "ffn_up.weight"] = rng.standard_normal((2 * d, d), dtype=np.float32)
        weights[p + "ffn_down.weight"] = rng.standard_normal((d, 2 * d), dtype=np.float32)
    weights["output_norm.weight"] = rng.standard_normal(d, dtype=np.float32)
    weights["output.weight"] = rng.standard_normal((4 * d, d), dtype=np.float32)
    return [Version(mix[0], _gguf(weights, mix)) for mix in QUANT_MIXES]


DATASETS = {
    "parquet (CDC)": lambda scale: parquet_versions(True, scale),
    "parquet (no CDC)": lambda scale: parquet_versions(False, scale),
    "checkpoints": checkpoint_versions,
    "quantizations": quantization_family,
}
