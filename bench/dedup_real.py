"""Dedup on real-shaped data: bytes each push sends, git-xet vs hf-xet vs git-lfs.

    python bench/dedup_real.py [--scale 1] [--json OUT] [--plot PNG]

Datasets (tests/support/real_shaped.py, fixed seeds; needs the `bench` extra): a Parquet table
of ~100 MB with rows appended, inserted, deleted and updated, written with and without
pyarrow's content-defined chunking; a ~100 MB safetensors checkpoint with one layer changed,
every weight's low bits perturbed, a tensor inserted, its tensors reordered; a family of GGUF
quantizations of one model. Each dataset's versions are pushed in order by each client to its
own `git xet serve` (tests/support/dedup_compare.py): git-xet as its agent pushes, hf-xet with
one HF_XET_CACHE. Per push: the chunk bytes it added to the store and the request bytes it
sent; git-lfs sends every version whole. Target: on every version, git-xet adds no more chunk
bytes than hf-xet.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import MIB, machine, write_json

from tests.support.dedup_compare import TOOLS, push_versions
from tests.support.real_shaped import checkpoint_versions, parquet_versions, quantization_family

# Sizes at --scale 1: Parquet and the checkpoint ~100 MB a version, the GGUF family ~135 MB.
DATASETS = {
    "parquet-cdc": ("Parquet, written with CDC", lambda s: parquet_versions(True, 55 * s)),
    "parquet": ("Parquet, written without CDC", lambda s: parquet_versions(False, 55 * s)),
    "checkpoints": ("safetensors checkpoints", lambda s: checkpoint_versions(4 * s)),
    "quantizations": ("GGUF quantization family", lambda s: quantization_family(s)),
}


def run(scale: float, names: list[str]) -> dict:
    datasets = {}
    for name in names:
        title, make = DATASETS[name]
        started = time.monotonic()
        versions = make(scale)
        pushes = {}
        with tempfile.TemporaryDirectory(prefix=f"git-xet-bench-{name}-") as tmp:
            for tool in TOOLS:
                pushes[tool] = [asdict(p) for p in push_versions(tool, versions, Path(tmp) / tool)]
        datasets[name] = {"title": title, "pushes": pushes, "seconds": time.monotonic() - started}
        print_dataset(name, datasets[name], flush=True)
    met = all(
        mine["new_bytes"] <= hf["new_bytes"] for d in datasets.values() for mine, hf in zip(d["pushes"]["git-xet"], d["pushes"]["hf-xet"])
    )
    return {"scale": scale, "machine": machine(), "datasets": datasets, "met": met}


def totals(dataset: dict) -> dict[str, float]:
    """Over the dataset's whole sequence: MiB each tool sent, and the share its dedup saved."""
    pushes = dataset["pushes"]
    size = sum(p["size"] for p in pushes["git-xet"])
    out = {"git-lfs": size / MIB}
    for tool in TOOLS:
        out[tool] = sum(p["sent_bytes"] for p in pushes[tool]) / MIB
        out[f"{tool} stored %"] = 100 * sum(p["new_bytes"] for p in pushes[tool]) / size
    return out


def print_dataset(name: str, dataset: dict, flush: bool = False) -> None:
    pushes = dataset["pushes"]
    print(f"\n{dataset['title']} ({name}): MiB per push")
    print(f"{'version':<20}{'size':>9}{'git-xet new':>13}{'hf-xet new':>12}{'git-xet sent':>14}{'hf-xet sent':>13}{'new ratio':>11}")
    for mine, hf in zip(pushes["git-xet"], pushes["hf-xet"]):
        ratio = mine["new_bytes"] / hf["new_bytes"] if hf["new_bytes"] else 1.0
        print(
            f"{mine['version']:<20}{mine['size'] / MIB:>9.2f}{mine['new_bytes'] / MIB:>13.2f}{hf['new_bytes'] / MIB:>12.2f}"
            f"{mine['sent_bytes'] / MIB:>14.2f}{hf['sent_bytes'] / MIB:>13.2f}{ratio:>11.3f}",
            flush=flush,
        )


def plot(summary: dict, path: Path) -> Path:
    """Bytes sent over each dataset's sequence of pushes, by tool (bench/dedup_real.png)."""
    from plot import COLORS, ensure_matplotlib

    ensure_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summary["datasets"])
    fig, ax = plt.subplots(figsize=(8, 3.8))
    width = 0.27
    for k, tool in enumerate(("git-lfs", "hf-xet", "git-xet")):
        values = [totals(summary["datasets"][n])[tool] for n in names]
        bars = ax.bar([i + (k - 1) * width for i in range(len(names))], values, width, label=tool, color=COLORS[tool])
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(names)), [summary["datasets"][n]["title"] for n in names], fontsize=8)
    ax.set_ylabel("MiB sent, all versions (lower is better)")
    ax.set_title("Dedup on real-shaped data: bytes sent per sequence of pushes", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="1: ~100 MB a version; smaller for a smoke test")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="comma-separated, of: " + ", ".join(DATASETS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path, help="draw the figure there")
    args = parser.parse_args()
    summary = run(args.scale, args.datasets.split(","))
    print(f"\ntarget (git-xet adds no more chunk bytes than hf-xet on every version): {'met' if summary['met'] else 'NOT met'}")
    write_json(args.json, summary)
    if args.plot:
        print(f"figure: {plot(summary, args.plot)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
