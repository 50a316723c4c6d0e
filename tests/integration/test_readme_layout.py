"""The Layout section of docs/architecture.md names every source file of the package, the installers, the
benchmarks and the shared test support: a tree that grows a module the page does not mention
(or loses one it still describes) fails here, so the map stays true."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPED = ("git_xet", "bench", "install", "tests/support")


def _layout_section() -> str:
    readme = (ROOT / "docs" / "architecture.md").read_text()
    start = readme.index("\n## Layout\n")
    return readme[start : readme.index("\n## ", start + 1)]


def _tracked(*dirs: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", *dirs], cwd=ROOT, capture_output=True, check=True).stdout
    return [Path(name) for name in listed.decode().split("\0") if name]


def _named(section: str, path: Path) -> bool:
    if path.name == "__init__.py" and path.parent.as_posix() != "git_xet":
        return True  # a package's marker; the package itself is named by its directory
    if path.suffix == ".pyi":
        return "_*.pyi" in section
    if path.parent.name == "peers":
        return "peers/" in section
    return re.search(rf"(?<![\w.]){re.escape(path.name)}(?![\w])", section) is not None


def test_every_file_is_named_in_the_layout() -> None:
    section = _layout_section()
    files = [p for p in _tracked(*MAPPED) if p.suffix in {".py", ".c", ".pyi", ".sh", ".mjs"}]
    assert len(files) > 50  # the listing worked
    missing = [p.as_posix() for p in files if not _named(section, p)]
    assert missing == []


def test_every_file_the_layout_names_exists() -> None:
    section = _layout_section()
    named = set(re.findall(r"(?<![\w.])([A-Za-z_][\w]*\.(?:py|c|sh))\b", section))
    existing = {p.name for p in _tracked(".")}
    assert named and named - existing == set()
