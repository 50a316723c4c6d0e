"""The pure parts of the prune check: git-lfs's dry-run and ls-files output, a git-lfs argv, and
the walk up a process table (prune_guard.py, platform/processes.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from git_xet.agent.prune_guard import PruneCall, prune_call, prunable_oids, reachable_oids
from git_xet.platform.processes import ProcessInfo, find_ancestor, is_git_lfs

oids = st.lists(st.binary(min_size=32, max_size=32).map(bytes.hex), unique=True, max_size=20)
sizes = st.integers(min_value=0, max_value=1 << 40)


def _human(size: int) -> str:
    """Like git-lfs's humanize.FormatBytes: a number and a unit (the check never reads it)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000:
            return f"{size:.1f} {unit}" if unit != "B" else f"{size} B"
        size //= 1000
    return f"{size} PB"


def _dry_run(listed: list[tuple[str, int]], redraws: int) -> str:
    """`git lfs prune --dry-run --verbose` as git-lfs prints it with forced progress: redrawn
    progress lines, the count, one line per object, the last repeated with ", done."."""
    out = "".join(f"prune: {n} local objects, 0 retained{' ' * 30}\r" for n in range(redraws))
    out += f"prune: {len(listed) + 3} local objects, 3 retained, done.\n"
    if listed:
        out += f"prune: {len(listed)} files would be pruned (1 MB)          "
        out += "".join(f"\n * {oid} ({_human(size)})   " for oid, size in listed)
        oid, size = listed[-1]
        out += f"\r * {oid} ({_human(size)}), done.\n"
    return out


@given(st.data(), oids, st.integers(min_value=0, max_value=5))
def test_the_dry_run_lists_each_prunable_object_once_in_order(data: st.DataObject, listed: list[str], redraws: int) -> None:
    with_sizes = [(oid, data.draw(sizes)) for oid in listed]
    assert prunable_oids(_dry_run(with_sizes, redraws)) == listed


@given(oids)
def test_no_other_line_is_taken_for_an_object(listed: list[str]) -> None:
    # The count line, another command's oids (no " * " and size), a short hash: none is an object.
    noise = "".join(f"{oid} * a.bin\n * {oid[:12]} (5 B)\n" for oid in listed)
    assert prunable_oids("prune: 2 local objects, 2 retained, done.\n" + noise) == []


@given(oids, st.lists(st.sampled_from(["*", "-"]), min_size=20, max_size=20))
def test_ls_files_all_long_gives_the_reachable_oids(listed: list[str], marks: list[str]) -> None:
    out = "".join(f"{oid} {mark} dir with space/{i}.bin\n" for i, (oid, mark) in enumerate(zip(listed, marks)))
    assert reachable_oids(out) == set(listed)


def test_prune_command_lines() -> None:
    assert prune_call(["git-lfs", "prune"]) == PruneCall((), None, False)
    assert prune_call(["/usr/bin/git-lfs", "prune", "-c", "--recent"]) == PruneCall(("--recent",), None, False)
    assert prune_call(["git-lfs", "prune", "-fc"]) == PruneCall(("--force",), None, False)
    assert prune_call(["git-lfs", "prune", "--force", "--verify-unreachable"]) == PruneCall(("--force",), True, False)
    last_wins = ["git-lfs", "prune", "--verify-unreachable", "--no-verify-unreachable"]
    assert prune_call(last_wins) == PruneCall((), False, False)
    assert prune_call(["git-lfs", "prune", "--", "--force"]) == PruneCall((), None, False)  # not an option after --


def test_fetch_command_lines() -> None:
    assert prune_call(["git-lfs", "fetch", "--prune"]) == PruneCall((), None, True)
    assert prune_call(["git-lfs", "fetch", "origin", "-rp"]) == PruneCall((), None, True)
    assert prune_call(["git-lfs", "fetch", "-p", "origin", "main"]) == PruneCall((), None, True)
    for not_pruning in (["git-lfs", "fetch", "origin"], ["git-lfs", "fetch", "--recent"], ["git-lfs", "fetch", "--", "-p"]):
        assert prune_call(not_pruning) is None


@given(st.sampled_from(["push", "pull", "filter-process", "smudge", "fsck", "pre-push", "checkout"]), st.lists(st.sampled_from(["--prune", "-p", "-f", "origin", "--all"])))
def test_other_commands_never_prune(command: str, args: list[str]) -> None:
    assert prune_call(["git-lfs", command, *args]) is None
    assert prune_call(["git-lfs"]) is None


def _table(names: list[str]) -> dict[int, ProcessInfo]:
    """A chain of processes: pid 100 + i is the child of 100 + i + 1; the last one's parent is init."""
    last = 100 + len(names) - 1
    return {100 + i: ProcessInfo(100 + i, 1 if 100 + i == last else 101 + i, name, f"t{i}", [name]) for i, name in enumerate(names)}


@given(st.integers(min_value=0, max_value=6), st.integers(min_value=0, max_value=3), st.integers(min_value=1, max_value=6))
def test_the_walk_finds_git_lfs_only_within_its_levels(below: int, above: int, levels: int) -> None:
    names = ["sh"] * below + ["git-lfs"] + ["git"] * above
    table = _table(names)
    found = find_ancestor(100, table.get, is_git_lfs, levels)
    if below < levels:
        assert found is not None and found.pid == 100 + below and found.start == f"t{below}"
    else:
        assert found is None


@given(st.integers(min_value=1, max_value=5), st.integers(min_value=0, max_value=4))
def test_the_walk_answers_unknown_where_the_table_cannot_tell(length: int, gap: int) -> None:
    table = _table(["sh"] * length + ["git-lfs"])
    del table[100 + min(gap, length)]  # a process gone, or an OS that cannot tell
    assert find_ancestor(100, table.get, is_git_lfs, 10) is None


def test_the_walk_stops_at_init_without_git_lfs() -> None:
    table = _table(["sh", "sh", "python"])
    assert find_ancestor(100, table.get, is_git_lfs, 10) is None
