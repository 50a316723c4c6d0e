"""The docs' commands, as the tests run them: a code block in a docs page that is meant to run
carries a marker on the line before its fence,

    <!-- test: NAME -->
    ```sh
    ...
    ```

and a test takes block NAME of that page verbatim (`block`), replaces only the documented
placeholders below by what it set up (`substitute`), and runs it with bash (`run_block`). So a
page cannot drift from what works: a changed command fails the test that runs it, and
tests/unit/test_docs_blocks.py fails for a marked block no test runs.

A marker may be indented (a block inside a list item); the block's lines lose that indentation."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

# Every placeholder a marked block may contain, and what it stands for. A test maps each one it
# replaces to a real value; anything else in a block runs exactly as written.
PLACEHOLDERS: dict[str, str] = {
    "/srv/xet": "the server's data directory",
    "/srv/git": "a directory of bare git repositories (the git host)",
    "/etc/git-xet": "the directory of the server's secret and configuration",
    "/opt/git-xet": "the installer's system-wide prefix (GIT_XET_HOME as root)",
    "https://xet.example.com": "the URL clients reach the server at",
    "--port 8080": "the port option of a server the block starts",
    "postgresql://git_xet@db.internal/git_xet": "the PostgreSQL database of the index",
    "http://127.0.0.1:8333": "the S3 endpoint of a local SeaweedFS",
    "-master.port=9333": "the master port of a local SeaweedFS (its gRPC port is this + 10000)",
    "-volume.port=8081": "the volume port of a local SeaweedFS (its gRPC port is this + 10000)",
    "-filer.port=8888": "the filer port of a local SeaweedFS (its gRPC port is this + 10000)",
    "-s3.port=8333": "the S3 port of a local SeaweedFS (its gRPC port is this + 10000)",
    "http://127.0.0.1:8080": "the URL of a local server a block started with --port 8080",
    "git@github.com:acme/models.git": "the repository on the git host",
}

_MARKER = re.compile(r"^(?P<indent>[ \t]*)<!-- test: (?P<name>[A-Za-z0-9_-]+) -->[ \t]*$")
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+)(?P<lang>[\w+-]*)[ \t]*$")


class DocsBlockError(AssertionError):
    """A page's markers or a test's use of them is wrong; the message says where."""


@dataclass(frozen=True)
class Block:
    page: str  # path under docs/, e.g. "teams.md"
    name: str
    lang: str
    text: str  # the block's lines as the page shows them, without the fences or their indentation


def parse(page: str, markdown: str) -> list[Block]:
    """Every marked block of one page, in order. A marker must be followed by a fence at its own
    indentation, the fence must close, and a name appears once per page."""
    lines = markdown.split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        marker = _MARKER.match(lines[i])
        i += 1
        if not marker:
            continue
        name, indent = marker["name"], marker["indent"]
        opening = _FENCE.match(lines[i]) if i < len(lines) else None
        if not opening or opening["indent"] != indent:
            raise DocsBlockError(f"{page}: marker {name!r} is not followed by a code fence at its indentation")
        fence = opening["fence"]
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i] != indent + fence:
            line = lines[i]
            if line.strip() and not line.startswith(indent):
                raise DocsBlockError(f"{page}: block {name!r} has a line less indented than its fence")
            body.append(line[len(indent) :])
            i += 1
        if i == len(lines):
            raise DocsBlockError(f"{page}: block {name!r} is never closed")
        i += 1
        if any(b.name == name for b in found):
            raise DocsBlockError(f"{page}: two blocks are marked {name!r}")
        found.append(Block(page, name, opening["lang"], "\n".join(body) + "\n"))
    return found


def blocks(page: str) -> list[Block]:
    return parse(page, (DOCS / page).read_text(encoding="utf-8"))


def all_blocks() -> list[Block]:
    return [b for path in sorted(DOCS.rglob("*.md")) for b in blocks(path.relative_to(DOCS).as_posix())]


def block(page: str, name: str) -> Block:
    """Block NAME of docs/PAGE, verbatim."""
    for found in blocks(page):
        if found.name == name:
            return found
    raise DocsBlockError(f"docs/{page} has no block marked {name!r}")


def substitute(text: str, mapping: dict[str, str]) -> str:
    """`text` with each documented placeholder in `mapping` replaced (longest first, so a
    placeholder inside another is not replaced in it). A key that is not a documented
    placeholder, or that the text does not contain, is an error: a test states exactly what it
    changes, and a page that stops using a placeholder fails its test."""
    unknown = sorted(set(mapping) - set(PLACEHOLDERS))
    if unknown:
        raise DocsBlockError(f"not documented placeholders: {unknown} (see PLACEHOLDERS)")
    absent = sorted(key for key in mapping if key not in text)
    if absent:
        raise DocsBlockError(f"the block does not contain {absent}")
    keys = sorted(mapping, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(k) for k in keys))
    return pattern.sub(lambda m: mapping[m.group(0)], text) if keys else text


def run_block(
    page: str,
    name: str,
    mapping: dict[str, str] | None = None,
    *,
    cwd: Path,
    env: dict[str, str],
    timeout: float = 300,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run block NAME of docs/PAGE with `bash -e` (each line as a user would type it, stopping at
    the first that fails), after `substitute`. Output is captured; a failure says which block."""
    found = block(page, name)
    script = substitute(found.text, mapping or {})
    proc = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"docs/{page} block {name!r} failed ({proc.returncode}):\n{script}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc
