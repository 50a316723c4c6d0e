"""The docs' runnable blocks: the extractor finds every marked block verbatim in generated
markdown, refuses a malformed marker, substitutes only documented placeholders, and every block
marked in docs/ is run by some test (no orphan markers, no test naming a block that is gone)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support import docs_blocks
from tests.support.docs_blocks import Block, DocsBlockError, parse, substitute

TESTS = Path(__file__).resolve().parents[1]


def _referenced() -> set[tuple[str, str]]:
    """(page, name) of every call in tests/ whose first two arguments are a page ("x.md") and a
    block name, as `run_block(PAGE, NAME, ...)` and `block(PAGE, NAME)` take them."""
    seen: set[tuple[str, str]] = set()
    for path in TESTS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or len(node.args) < 2:
                continue
            page, name = (arg.value if isinstance(arg, ast.Constant) else None for arg in node.args[:2])
            if isinstance(page, str) and isinstance(name, str) and page.endswith(".md"):
                seen.add((page, name))
    return seen


def test_every_marked_block_is_run_by_a_test() -> None:
    marked = {(b.page, b.name) for b in docs_blocks.all_blocks()}
    assert len(marked) >= 8  # the pages' runnable blocks were found
    assert sorted(marked - _referenced()) == []


def test_every_block_a_test_names_is_marked() -> None:
    marked = {(b.page, b.name) for b in docs_blocks.all_blocks()}
    assert sorted(_referenced() - marked) == []


# Lines a block may hold: anything but a line that would close its fence.
_line = st.text(st.characters(blacklist_categories=["Cs", "Cc"]), max_size=30).filter(lambda s: not s.lstrip().startswith("```"))
_name = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
_noise = st.lists(_line.filter(lambda s: "<!--" not in s), max_size=3).map(lambda ls: "\n".join(ls))


@given(
    st.lists(st.tuples(_name, st.sampled_from(["", "sh", "ini", "python"]), st.lists(_line, max_size=6), st.sampled_from(["", "  ", "    "])), max_size=5, unique_by=lambda t: t[0]),
    st.lists(_noise, min_size=6, max_size=6),
)
def test_extractor_finds_each_marked_block_verbatim(specs: list[tuple[str, str, list[str], str]], noise: list[str]) -> None:
    """Generated pages: marked blocks (any indentation, language, content) between prose and
    unmarked blocks come back exactly as written, in order, and nothing else does."""
    parts = [noise[0], "```sh\nnot marked\n```"]
    expected = []
    for k, (name, lang, body, indent) in enumerate(specs):
        fenced = [f"{indent}<!-- test: {name} -->", f"{indent}```{lang}", *[(indent + line) if line else "" for line in body], f"{indent}```"]
        parts += ["\n".join(fenced), noise[(k + 1) % len(noise)]]
        expected.append(Block("p.md", name, lang, "\n".join(body) + "\n"))
    assert parse("p.md", "\n".join(parts) + "\n") == expected


@pytest.mark.parametrize(
    "page",
    [
        "<!-- test: a -->\ntext\n```sh\nx\n```\n",  # not followed by its fence
        "<!-- test: a -->\n```sh\nx\n",  # never closed
        "  <!-- test: a -->\n```sh\nx\n```\n",  # fence not at the marker's indentation
        "  <!-- test: a -->\n  ```sh\nx\n  ```\n",  # a line outside the block's indentation
        "<!-- test: a -->\n```\nx\n```\n<!-- test: a -->\n```\ny\n```\n",  # a name twice
    ],
)
def test_malformed_markers_are_refused(page: str) -> None:
    with pytest.raises(DocsBlockError):
        parse("p.md", page)


def test_substitution_replaces_only_documented_placeholders() -> None:
    text = "git xet serve --data /srv/xet --public-url https://xet.example.com\n"
    assert substitute(text, {"/srv/xet": "/tmp/d", "https://xet.example.com": "http://127.0.0.1:9"}) == (
        "git xet serve --data /tmp/d --public-url http://127.0.0.1:9\n"
    )
    with pytest.raises(DocsBlockError, match="not documented"):
        substitute(text, {"--data": "--other"})
    with pytest.raises(DocsBlockError, match="does not contain"):
        substitute(text, {"/etc/git-xet": "/tmp/e"})


def test_a_placeholder_is_replaced_wherever_it_occurs() -> None:
    text = "serve --data /srv/xet --public-url https://xet.example.com; ls /srv/xet-objects\n"
    got = substitute(text, {"/srv/xet": "/d", "https://xet.example.com": "http://127.0.0.1:5"})
    assert got == "serve --data /d --public-url http://127.0.0.1:5; ls /d-objects\n"
