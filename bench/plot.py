"""The benchmark figure: git-xet vs hf-xet vs git-lfs on the headline rows of one run.

    python bench/plot.py [bench/results/summary.json] [--out bench/results/benchmarks.png]

run_all.py calls `plot(summary, path)` after a run; matplotlib is a bench-only dependency,
installed on first use (`ensure_matplotlib`), never needed by git-xet itself.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

COLORS = {"git-xet": "#2b6cb0", "hf-xet": "#dd6b20", "git-lfs": "#718096"}


def ensure_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "matplotlib"], check=True)


def _panels(results: dict) -> list[tuple[str, str, list[tuple[str, dict[str, float]]]]]:
    """(title, unit, [(row label, {tool: value})]) for each panel, from run_all's results."""
    panels = []
    t = results.get("transfer")
    if t:
        med, gib = t["median_seconds"], t["size_mib"] / 1024
        label = f"{t['size_mib']} MiB" if t["size_mib"] < 1024 else f"{gib:g} GiB"
        rows = [(f"upload {label}", {"git-xet": med["ours_up"], "hf-xet": med["theirs_up"]}), (f"download {label}", {"git-xet": med["ours_down"], "hf-xet": med["theirs_down"]})]
        panels.append(("Through `git xet serve` on loopback", "seconds (lower is better)", rows))
        if "ours_up_cpu" in med:
            cpu = [
                ("upload", {"git-xet": med["ours_up_cpu"] / gib, "hf-xet": med["theirs_up_cpu"] / gib}),
                ("download", {"git-xet": med["ours_down_cpu"] / gib, "hf-xet": med["theirs_down_cpu"] / gib}),
            ]
            panels.append(("Client CPU per GiB", "CPU seconds per GiB (user + sys)", cpu))
    g = results.get("git_e2e")
    if g:
        label = f"{g['files']} x {g['file_mib']} MiB"
        tools = g["tools"]
        rows = [
            (f"git push {label}", {k: tools[k]["push"]["seconds"] for k in ("git-xet", "git-lfs")}),
            (f"git clone {label}", {k: tools[k]["clone"]["seconds"] for k in ("git-xet", "git-lfs")}),
            ("git push v2 (1% edited)", {k: tools[k]["push_v2"]["seconds"] for k in ("git-xet", "git-lfs")}),
        ]
        panels.append(("git on loopback", "seconds (lower is better)", rows))
    w = results.get("wan")
    if w:
        tools = w["tools"]
        names = {"push": f"push new {w['file_mib']} MiB", "clone": f"clone {w['file_mib']} MiB", "push_v2": "push v2 (1% edited)", "clone_model": f"clone model-like {w['model_mib']} MiB", "push_small": f"push {w['small_files']} small files", "clone_small": f"clone {w['small_files']} small files"}
        rows = [(label, {k: tools[k][phase]["seconds"] for k in ("git-xet", "git-lfs")}) for phase, label in names.items()]
        panels.append((f"git over {w['mbit']:g} Mbit/s, {w['rtt_ms']:g} ms RTT", "seconds (lower is better)", rows))
    return panels


def plot(summary: dict, out: Path) -> Path:
    """Draw the headline rows of a run_all summary into `out` (PNG)."""
    ensure_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = _panels(summary["results"])
    rows_total = sum(len(rows) for _, _, rows in panels)
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 1.2 + 0.8 * rows_total + 0.6 * len(panels)), squeeze=False, height_ratios=[len(rows) for _, _, rows in panels])
    for ax, (title, unit, rows) in zip(axes[:, 0], panels):
        tools = [t for t in COLORS if any(t in values for _, values in rows)]
        height = 0.8 / len(tools)
        for k, tool in enumerate(tools):
            ys = [i + (k - (len(tools) - 1) / 2) * height for i in range(len(rows))]
            values = [values.get(tool, 0.0) for _, values in rows]
            bars = ax.barh(ys, values, height=height, color=COLORS[tool], label=tool)
            for bar, value, (_, present) in zip(bars, values, rows):
                if tool in present:
                    ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2, f" {value:.2f}", va="center", fontsize=7)
        ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlabel(unit, fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
        ax.margins(x=0.15)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    fig.suptitle(f"git-xet benchmarks, {summary.get('date', '')}: {summary['machine']}", fontsize=9)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = Path(__file__).resolve().parent
    parser.add_argument("summary", type=Path, nargs="?", default=here / "results" / "summary.json")
    parser.add_argument("--out", type=Path, default=here / "results" / "benchmarks.png")
    args = parser.parse_args()
    print(plot(json.loads(args.summary.read_text()), args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
