"""platform/resolve.py: realpath_below answers what os.path.realpath answers, for any tree of
directories, files and symbolic links (inside the base, out of it, dangling, looping) and any
path into it (plain, with `.`, `..`, doubled separators, through links, missing)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.platform.resolve import realpath_below

NAMES = ["a", "b", "c"]
# Entries of the tree, each a path of up to three names below `base` or `outside`, and what
# is there: a directory, a file, or a link to another entry (relative or absolute).
entries = st.lists(
    st.tuples(
        st.sampled_from(["base", "outside"]),
        st.lists(st.sampled_from(NAMES), min_size=1, max_size=3),
        st.sampled_from(["dir", "file", "link-rel", "link-abs"]),
        st.sampled_from(["base", "outside"]),
        st.lists(st.sampled_from([*NAMES, ".."]), min_size=0, max_size=3),
    ),
    max_size=12,
)
paths = st.lists(st.sampled_from([*NAMES, ".", "..", ""]), min_size=0, max_size=5)


def _build(root: Path, tree: list) -> None:
    for top, names, kind, target_top, target_names in tree:
        where = root.joinpath(top, *names)
        try:
            where.parent.mkdir(parents=True, exist_ok=True)
            if kind == "dir":
                where.mkdir(exist_ok=True)
            elif kind == "file":
                where.write_bytes(b"x")
            else:
                target = root.joinpath(target_top, *target_names)
                where.symlink_to(os.path.relpath(target, where.parent) if kind == "link-rel" else target)
        except OSError:
            pass  # (a name taken by an earlier entry, or under a file or a dangling link: skipped)


@settings(max_examples=300, deadline=None)
@given(tree=entries, names=paths, from_resolved_base=st.booleans())
def test_answers_what_realpath_answers(tree: list, names: list[str], from_resolved_base: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(os.path.realpath(tmp))
        (root / "base").mkdir()
        (root / "outside").mkdir()
        _build(root, tree)
        base = os.path.join(str(root / "base"), "")
        path = base + os.sep.join(names) if from_resolved_base else str(root / "outside") + os.sep + os.sep.join(names)
        resolved, found = realpath_below(path, (base,))
        assert resolved == os.path.realpath(path)
        if found is not None:
            assert resolved == path  # only a plain path found on the way is its own resolution
            real = os.stat(resolved)
            assert (found.st_ino, found.st_dev, found.st_size) == (real.st_ino, real.st_dev, real.st_size)


def test_a_plain_path_below_the_base_is_resolved_with_one_lstat_per_name(monkeypatch) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(os.path.realpath(tmp), "")
        Path(base, "objects", "ab", "cd").mkdir(parents=True)
        Path(base, "objects", "ab", "cd", "oid").write_bytes(b"12345")
        calls: list[str] = []
        real_lstat = os.lstat
        monkeypatch.setattr(os, "lstat", lambda p, *a, **k: calls.append(str(p)) or real_lstat(p, *a, **k))
        resolved, found = realpath_below(base + "objects/ab/cd/oid", (base,))
        monkeypatch.undo()  # (before the directory's removal lstats it)
    assert resolved == base + "objects/ab/cd/oid" and found is not None and found.st_size == 5
    assert calls == [base + "objects", base + "objects/ab", base + "objects/ab/cd", base + "objects/ab/cd/oid"]
