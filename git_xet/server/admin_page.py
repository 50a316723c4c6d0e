"""The admin page's HTML, rendered on the server from operator.Operator.summary (no script: the
storage chart is inline SVG). Every value from the store is escaped."""

from __future__ import annotations

import time
from html import escape

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.6em}
table{border-collapse:collapse}td,th{padding:.25em .8em;border-bottom:1px solid #ddd;text-align:right}
td:first-child,th:first-child{text-align:left}.note{color:#555}.done{background:#e6f4e6;padding:.4em}
"""

CHART_W, CHART_H = 640, 160


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _page(title: str, body: str) -> str:
    return f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>'


def sign_in(problem: str = "") -> str:
    note = f'<p class="note" id="problem">{escape(problem)}</p>' if problem else ""
    form = '<form method="post" action="/admin/sign-in"><label>Admin token <input type="password" name="token" autocomplete="off"></label> <button>Sign in</button></form>'
    return _page("git-xet admin: sign in", f"<h1>git-xet admin</h1>{note}<p>This page needs the server's admin token ($GIT_XET_ADMIN_TOKEN).</p>{form}")


def chart(points: list[tuple[float, int]]) -> str:
    """Stored bytes over time as an SVG polyline (one point is drawn as a dot)."""
    if not points:
        return '<p class="note">No samples yet: one is recorded with the first push of each hour, and with each gc run.</p>'
    t0, t1 = points[0][0], points[-1][0]
    top = max(v for _, v in points) or 1
    coords = [(20 + (CHART_W - 40) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.5), CHART_H - 20 - (CHART_H - 40) * v / top) for t, v in points]
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dots = "".join(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="#2a6ebb"/>' for x, y in coords)
    return (
        f'<svg id="storage-chart" width="{CHART_W}" height="{CHART_H}" viewBox="0 0 {CHART_W} {CHART_H}" role="img" aria-label="stored bytes over time">'
        f'<rect width="{CHART_W}" height="{CHART_H}" fill="#f7f9fc"/><polyline points="{line}" fill="none" stroke="#2a6ebb" stroke-width="2"/>{dots}'
        f'<text x="20" y="14" font-size="11">{escape(_size(top))}</text>'
        f'<text x="20" y="{CHART_H - 4}" font-size="11">{escape(_when(t0))}</text>'
        f'<text x="{CHART_W - 20}" y="{CHART_H - 4}" font-size="11" text-anchor="end">{escape(_when(t1))}</text></svg>'
    )


def _quota(limit: int | None) -> str:
    """A repository's quota cell (logical bytes; `git xet repo quota` sets it)."""
    return '<td class="quota">none</td>' if limit is None else f'<td class="quota" data-value="{limit}">{_size(limit)}</td>'


def render(summary: dict, csrf: str, done: str = "") -> str:
    totals = summary["totals"]
    parts = ["<h1>git-xet admin</h1>"]
    if done:
        parts.append(f'<p class="done" id="done">{escape(done)}</p>')
    parts.append(
        '<table id="totals"><tr><th>Store</th><th>Value</th></tr>'
        f'<tr><td>xorbs</td><td data-value="{totals["xorbs"]}">{totals["xorbs"]}</td></tr>'
        f'<tr><td>shards</td><td data-value="{totals["shards"]}">{totals["shards"]}</td></tr>'
        f'<tr><td>stored bytes</td><td data-value="{totals["stored_bytes"]}">{_size(totals["stored_bytes"])}</td></tr>'
        f'<tr><td>logical bytes</td><td data-value="{totals["logical_bytes"]}">{_size(totals["logical_bytes"])}</td></tr>'
        f'<tr><td>saved by dedup</td><td data-value="{totals["dedup_saved_bytes"]}">{_size(totals["dedup_saved_bytes"])}</td></tr></table>'
    )
    rows = "".join(
        f'<tr data-repo="{escape(r["repo"])}"><td>{escape(r["repo"])}</td><td class="files">{r["files"]}</td>'
        f'<td class="logical" data-value="{r["logical_bytes"]}">{_size(r["logical_bytes"])}</td>'
        f'<td data-value="{r["unique_bytes"]}">{_size(r["unique_bytes"])}</td><td data-value="{r["shared_bytes"]}">{_size(r["shared_bytes"])}</td>'
        f'<td class="ratio">{r["dedup_ratio"]:.2f}</td>{_quota(summary["quotas"].get(r["repo"]))}</tr>'
        for r in summary["repos"]
    )
    parts.append(
        '<h2>Repositories</h2><table id="repos"><tr><th>Repository</th><th>Files</th><th>Logical</th><th>Only its own</th><th>Shared</th>'
        f"<th>Dedup ratio</th><th>Quota</th></tr>{rows}</table>"
    )
    now = time.time()
    points = [(s["at"], s["stored_bytes"]) for s in summary["samples"]] + [(now, totals["stored_bytes"])]
    parts.append(f"<h2>Storage over time</h2>{chart(points)}")
    pushes = "".join(
        f'<tr><td>{escape(p["repo"])}</td><td>{p["files"]}</td><td data-value="{p["bytes"]}">{_size(p["bytes"])}</td><td>{escape(_when(p["at"]))}</td></tr>' for p in summary["pushes"]
    )
    parts.append(f'<h2>Recent pushes</h2><table id="pushes"><tr><th>Repository</th><th>Files</th><th>Bytes</th><th>When</th></tr>{pushes}</table>')
    locks = "".join(
        f'<tr data-lock="{escape(lock["id"])}"><td>{escape(lock["repo"])}</td><td class="path">{escape(lock["path"])}</td><td>{escape(lock["owner"])}</td>'
        f'<td>{escape(_when(lock["locked_at"]))}</td><td><form method="post" action="/admin/unlock" class="unlock">'
        f'<input type="hidden" name="csrf" value="{escape(csrf)}"><input type="hidden" name="repo" value="{escape(lock["repo"])}">'
        f'<input type="hidden" name="id" value="{escape(lock["id"])}"><button>Force unlock</button></form></td></tr>'
        for lock in summary["locks"]
    )
    parts.append(
        '<h2>Locks</h2><p class="note">Git LFS file locks. A forced unlock releases one whoever holds it, as `git lfs unlock --force` does.</p>'
        f'<table id="locks"><tr><th>Repository</th><th>Path</th><th>Owner</th><th>Since</th><th></th></tr>{locks}</table>'
    )
    revoked = "".join(f"<li>{escape(t)}</li>" for t in summary["revoked_tokens"]) or "<li>none</li>"
    parts.append(
        "<h2>Tokens</h2><p class=\"note\">User tokens are not stored on the server: revoke one by pasting it, or its id "
        "(`git xet token` prints it). Its CAS tokens and URLs stop within a second.</p>"
        f'<form method="post" action="/admin/revoke" id="revoke"><input type="hidden" name="csrf" value="{escape(csrf)}">'
        '<label>Token or token id <input name="token" size="50" autocomplete="off"></label> <button>Revoke</button></form>'
        f'<h3>Revoked</h3><ul id="revoked">{revoked}</ul>'
    )
    return _page("git-xet admin", "".join(parts))
