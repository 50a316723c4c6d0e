"""Answers from the LFS batch API a window of objects at a time (issue 41 §4).

git-lfs hands a custom agent one object at a time, so an agent that asks the remote's batch
API itself (`install --native`) made one batch round per object: 1003 objects took 15.7 s to
clone where git-lfs's own batching (100 objects a call) took 8.9 s. The agent cannot see
git-lfs's queue, but it can guess it: the LFS pointers of the checked-out commit (what a clone,
`git lfs pull` and `git lfs checkout` fetch, and what a push of new work usually sends). On an
object it has no answer for, it asks for that object and the next WINDOW - 1 pointers it has
not asked about, in one call, and keeps the answers worth keeping (a download's action; an
upload's action or "already stored"). A wrong guess costs entries in a call already made.

An object outside HEAD's tree (`git lfs fetch origin other`, `git lfs fetch --all`, a push of
a branch that is not checked out) widens the guess: the trees of the refs the git-lfs command
line names (platform/processes.py reads it; git-lfs's pre-push gets its refs on stdin, which
no agent sees), the objects that commits on no remote-tracking branch changed (what a push
sends), the trees of the most recently committed branches, remote branches and tags, and the
objects recent history changed (`git lfs fetch --all`), one step at a time until one holds
the object, whose pointers the next windows then follow. The work is bounded per agent: at
most MAX_TREES trees and MAX_LOGGED commits, MAX_ENTRIES entries in all, and MAX_CANDIDATES
blobs read, each once. An object in none of them is asked on its own, as before.
"""

from __future__ import annotations

import bisect
import logging
import re
import subprocess
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from ..platform.gitcmd import run_git
from .lineage import lfs_argv

if TYPE_CHECKING:  # the HTTP stack loads only for HTTP stores (routing.py)
    from ..client.lfs_batch import BatchObject

log = logging.getLogger("git_xet.agent")

WINDOW = 100  # objects per batch call, as git-lfs sends
# A pointer without extensions is 126-145 bytes (version, oid and size lines); only blobs of
# that size are read, at most MAX_CANDIDATES of them (~15 MB of `git cat-file`), so a tree of
# many small source files costs a bounded read. Pointers past the cap are asked one by one.
POINTER_SIZES = range(126, 146)
MAX_CANDIDATES = 100_000
# Trees listed per agent (HEAD's included), and their entries in all: an `ls-tree -r` costs
# about what `git status` does, so widening stops after 16 trees or ~3x a 100k-file tree.
MAX_TREES = 16
MAX_ENTRIES = 300_000
MAX_LOGGED = 1000  # commits of history read for the objects they changed
_POINTER = re.compile(rb"version https://git-lfs\.github\.com/spec/v1\noid sha256:([0-9a-f]{64})\nsize ([0-9]+)\n")
_GIT_TIMEOUT = 60.0
# git-lfs commands whose positional arguments after the remote name refs (git lfs fetch|pull|push
# REMOTE REF...), and those of their options that take a value as the next argument.
_REF_COMMANDS = ("fetch", "pull", "push")
_VALUED = ("-I", "--include", "-X", "--exclude")

Ask = Callable[[Sequence[tuple[str, int]]], "list[BatchObject]"]
Pointers = list[tuple[str, int]]


class PointerReader:
    """(oid, size) of the LFS pointers in trees, each pointer-sized blob read at most once and
    at most MAX_CANDIDATES of them in all."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()
        self.entries = 0  # tree entries listed so far

    def new_pointers(self, rev: str) -> Pointers:
        """The pointers of `rev`'s tree, in path order, that no earlier call returned; empty when
        git cannot tell (no repository, no commit yet, not a commit)."""
        try:
            tree = subprocess.run(["git", "ls-tree", "-r", "-l", "-z", rev], capture_output=True, timeout=_GIT_TIMEOUT, check=True).stdout
            blobs = []
            self.entries += tree.count(b"\0")
            for entry in tree.split(b"\0"):
                meta, _, _path = entry.partition(b"\t")
                fields = meta.split()
                if len(fields) == 4 and fields[1] == b"blob" and fields[3].isdigit() and int(fields[3]) in POINTER_SIZES:
                    blobs.append(fields[2])
            return self._read(blobs)
        except (OSError, subprocess.SubprocessError) as exc:
            log.debug("no pointer list to batch transfers with from %s: %s", rev, exc)
            return []

    def changed_pointers(self, revs: Sequence[str]) -> Pointers:
        """The pointers that the commits `revs` select (the newest MAX_LOGGED) added or changed,
        newest first, that no earlier call returned: the objects of history (a push of several
        commits, `git lfs fetch --all`) that no ref's tree holds any more."""
        try:
            raw = subprocess.run(
                ["git", "log", "--format=", "--raw", "--no-abbrev", "--no-renames", "-z", "--diff-filter=AM", f"--max-count={MAX_LOGGED}", *revs, "--"],
                capture_output=True, timeout=_GIT_TIMEOUT, check=True,
            ).stdout  # fmt: skip
            changed = []  # ":<old mode> <new mode> <old blob> <new blob> <status>", then the path
            for token in raw.split(b"\0"):
                fields = token.split()
                if len(fields) == 5 and fields[0].startswith(b":") and fields[1].startswith(b"100"):
                    changed.append(fields[3])
            changed = list(dict.fromkeys(b for b in changed if b not in self._seen))[: max(0, MAX_ENTRIES - self.entries)]
            self.entries += len(changed)
            if not changed:
                return []
            sizes = subprocess.run(["git", "cat-file", "--batch-check"], input=b"\n".join(changed) + b"\n", capture_output=True, timeout=_GIT_TIMEOUT, check=True).stdout
            blobs = [f[0] for f in (line.split() for line in sizes.splitlines()) if len(f) == 3 and f[1] == b"blob" and f[2].isdigit() and int(f[2]) in POINTER_SIZES]
            return self._read(blobs)
        except (OSError, subprocess.SubprocessError) as exc:
            log.debug("no pointer list to batch transfers with from the history of %s: %s", " ".join(revs), exc)
            return []

    def _read(self, blobs: list[bytes]) -> Pointers:
        """The pointers among `blobs` (pointer-sized) not read before, within MAX_CANDIDATES."""
        fresh = list(dict.fromkeys(b for b in blobs if b not in self._seen))[: max(0, MAX_CANDIDATES - len(self._seen))]
        if not fresh:
            return []
        self._seen.update(fresh)
        out = subprocess.run(["git", "cat-file", "--batch"], input=b"\n".join(fresh) + b"\n", capture_output=True, timeout=_GIT_TIMEOUT, check=True).stdout
        return _parse_pointers(out)


def _parse_pointers(out: bytes) -> Pointers:
    """The pointers among `git cat-file --batch`'s blobs, each oid once, in their order."""
    pointers: dict[str, int] = {}
    pos = 0
    while pos < len(out):
        header_end = out.find(b"\n", pos)
        header = out[pos:header_end].split()
        if header_end < 0 or len(header) != 3 or not header[2].isdigit():
            break  # "<blob> missing" cannot happen for a tree's own blobs; stop rather than guess
        size = int(header[2])
        match = _POINTER.match(out, header_end + 1, header_end + 1 + size)
        if match:
            pointers.setdefault(match[1].decode(), int(match[2]))
        pos = header_end + 1 + size + 1
    return list(pointers.items())


def named_refs(argv: Sequence[str]) -> list[str]:
    """The refs a git-lfs command line names (`git-lfs fetch origin main other` -> main, other,
    origin/main, origin/other), most likely first; none for other commands, for `push --stdin`
    or `--object-id` (whose arguments are not refs) or when argv is not git-lfs's."""
    if len(argv) < 3 or argv[1] not in _REF_COMMANDS:
        return []
    positional: list[str] = []
    args = iter(argv[2:])
    for arg in args:
        if arg in ("--stdin", "--object-id"):
            return []
        if arg in _VALUED:
            next(args, None)
        elif arg == "--":
            positional.extend(args)
        elif not arg.startswith("-"):
            positional.append(arg)
    if len(positional) < 2:
        return []
    remote, names = positional[0], positional[1:]
    return [*names, *(f"{remote}/{name}" for name in names)]


def _commits(revs: Sequence[str]) -> list[str]:
    """The commits `revs` name, in order, each once; those that name none are left out."""
    if not revs:
        return []
    listed = run_git("cat-file", "--batch-check=%(objectname) %(objecttype)", input="".join(f"{rev}^{{commit}}\n" for rev in revs), timeout=_GIT_TIMEOUT)
    commits = [line.split()[0] for line in listed.stdout.splitlines() if line.endswith(" commit")] if listed.ok else []
    return list(dict.fromkeys(commits))


def _recent_refs() -> list[str]:
    """The commits of the most recently committed branches, remote branches and tags."""
    refs = ("refs/heads", "refs/remotes", "refs/tags")
    listed = run_git("for-each-ref", "--sort=-committerdate", f"--count={4 * MAX_TREES}", "--format=%(objectname) %(*objectname)", *refs, timeout=_GIT_TIMEOUT)
    return [line.split()[-1] for line in listed.stdout.splitlines() if line.strip()] if listed.ok else []


def guessed_trees(argv: Callable[[], list[str] | None] = lfs_argv) -> Iterator[Pointers]:
    """The pointers git-lfs is likely working on, a batch at a time, most likely first: HEAD's,
    those of the refs its command line names, those that commits on no remote-tracking branch
    changed (what a push sends), those of recent refs (at most MAX_TREES trees in all), and
    those recent history changed; each pointer once, within MAX_ENTRIES entries listed. Lazy:
    nothing is listed before it is asked for."""
    reader = PointerReader()
    yield reader.new_pointers("HEAD")
    done = set(_commits(["HEAD"]))
    listed = 1  # trees

    def tips(commits: Iterable[str]) -> Iterator[Pointers]:
        nonlocal listed
        for commit in commits:
            if listed == MAX_TREES or reader.entries >= MAX_ENTRIES:
                return
            if commit not in done:
                done.add(commit)
                listed += 1
                yield reader.new_pointers(commit)

    yield from tips(_commits(named_refs(argv() or [])))
    if reader.entries < MAX_ENTRIES:
        yield reader.changed_pointers(["--branches", "--not", "--remotes"])
    yield from tips(_recent_refs())
    if reader.entries < MAX_ENTRIES:
        yield reader.changed_pointers(["--all"])


class PointerGuess:
    """The guessed pointers in one order, widened a batch (a tree, some history) at a time only
    when an object is not in it yet."""

    def __init__(self, trees: Iterable[Pointers]) -> None:
        self._trees = iter(trees)
        self.order: Pointers = []
        self._position: dict[str, int] = {}
        self._starts: list[int] = []  # where each batch's new pointers begin in the order

    def around(self, position: int | None) -> Iterator[tuple[str, int]]:
        """The pointers to ask with the one at `position`, best first: the rest of its batch
        (the ref git-lfs is working on) from there on, then from the batch's start, then the
        batches after it and those before; all of them from the start for None."""
        if position is None:
            yield from self.order
            return
        batch = bisect.bisect_right(self._starts, position) - 1
        start = self._starts[batch]
        end = self._starts[batch + 1] if batch + 1 < len(self._starts) else len(self.order)
        for lo, hi in ((position + 1, end), (start, position), (end, len(self.order)), (0, start)):
            yield from self.order[lo:hi]

    def holds(self, oid: str) -> bool:
        return oid in self._position

    def find(self, oid: str) -> int | None:
        """The position of `oid` in the order, widening it until it is there; None when no
        tree left holds it."""
        while oid not in self._position:
            tree = next(self._trees, None)
            if tree is None:
                return None
            self._starts.append(len(self.order))
            for pointer in tree:
                if pointer[0] not in self._position:
                    self._position[pointer[0]] = len(self.order)
                    self.order.append(pointer)
            log.debug("batching over %d guessed LFS pointers", len(self.order))
        return self._position[oid]


class BatchPrefetch:
    """Batch answers for one operation ("download" or "upload"), asked WINDOW objects at a time
    in the guessed pointers' order."""

    def __init__(self, operation: str, ask: Ask, trees: Callable[[], Iterable[Pointers]] = guessed_trees) -> None:
        self._operation = operation
        self._ask = ask
        self._trees = trees
        self._guess: PointerGuess | None = None  # made on the first object
        self._asked: set[str] = set()
        self._asked_guessed = 0  # how many of _asked were in the guess when asked
        self._answers: dict[str, BatchObject] = {}
        self.calls = 0

    def answer(self, oid: str, size: int) -> BatchObject:
        """The batch answer for (oid, size): kept from an earlier call, or from a new call that
        also asks for the next pointers. An error is not kept (asked again on its own, it is
        reported for the object it concerns), nor a download answer without an action."""
        kept = self._answers.pop(oid, None)
        if kept is not None:
            return kept
        window = [(oid, size), *self._next_after(oid)]
        self.calls += 1
        answers = self._ask(window)
        for other, _ in window:
            if other not in self._asked:
                self._asked.add(other)
                self._asked_guessed += self._guess is not None and self._guess.holds(other)
        mine = None
        for (other, _), answer in zip(window, answers):
            if other == oid:
                mine = answer
            elif answer.error_message() is None and (self._operation == "upload" or answer.action("download") is not None):
                self._answers[other] = answer
        assert mine is not None  # the window starts with oid
        return mine

    def _next_after(self, oid: str) -> Pointers:
        if self._guess is None:
            self._guess = PointerGuess(self._trees())
        position = self._guess.find(oid)
        if self._asked_guessed >= len(self._guess.order):
            return []  # every guessed pointer was asked about
        picked: Pointers = []
        for candidate in self._guess.around(position):
            if len(picked) == WINDOW - 1:
                break
            if candidate[0] != oid and candidate[0] not in self._asked and candidate[0] not in self._answers:
                picked.append(candidate)
        return picked
