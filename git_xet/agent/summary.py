"""What a push sent and deduplicated: one line on the terminal per push, and `git xet stats`.

git-lfs runs several agents per push and tells none of them which push it is or when the
others finish. Each agent that uploads registers in `<git-common-dir>/xet/pushes.jsonl` under
the id of the git-lfs process that started it, and appends its totals when it exits; the
last of a push's agents to exit (every registered agent has reported) prints the sum. All
registrations precede any exit: git-lfs sends `terminate` only once its whole queue is done.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from .lineage import lfs_process_id

LOG_NAME = "pushes.jsonl"
_KEEP_BYTES = 256 * 1024  # the log is trimmed to its newest half beyond this


class PushTotals:
    """One agent's counters, or a push's sum of them; `as_dict` is their log and JSON form."""

    def __init__(
        self,
        files: int = 0,  # uploaded by this push
        file_bytes: int = 0,
        sent_bytes: int = 0,  # xorb bytes that went to the store (after compression)
        new_bytes: int = 0,  # chunk bytes the store did not have
        deduped_bytes: int = 0,  # chunk bytes it already had
        already_stored: int = 0,  # files the store had whole: nothing sent
        already_stored_bytes: int = 0,
    ) -> None:
        self.files = files
        self.file_bytes = file_bytes
        self.sent_bytes = sent_bytes
        self.new_bytes = new_bytes
        self.deduped_bytes = deduped_bytes
        self.already_stored = already_stored
        self.already_stored_bytes = already_stored_bytes

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))

    @classmethod
    def from_entry(cls, entry: dict) -> PushTotals:
        """The counters of one `done` entry of the push log (a missing one counts 0)."""
        return cls(**{name: int(entry.get(name, 0)) for name in cls().as_dict()})

    def add(self, other: PushTotals) -> None:
        for name, value in other.as_dict().items():
            setattr(self, name, getattr(self, name) + value)


def human(n: int) -> str:
    """Decimal units, as git-lfs's progress meter prints them."""
    value: float = n
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def describe_download(totals: PushTotals) -> str:
    """A clone's or fetch's line: files and bytes written, and what crossed the network (xorb
    ranges, compressed; chunks repeated within or across files are fetched once)."""
    n = totals.files
    return f"downloaded {n} file{'s' if n != 1 else ''} ({human(totals.file_bytes)}): fetched {human(totals.sent_bytes)} from the store"


def describe(totals: PushTotals) -> str:
    parts = []
    if totals.files:
        shared = 100 * totals.deduped_bytes / totals.file_bytes if totals.file_bytes else 0.0
        parts.append(
            f"uploaded {totals.files} file{'s' if totals.files != 1 else ''} ({human(totals.file_bytes)}): "
            f"sent {human(totals.sent_bytes)}, {human(totals.deduped_bytes)} ({shared:.1f}%) already in the store"
        )
    if totals.already_stored:
        n = totals.already_stored
        parts.append(f"{n} file{'s' if n != 1 else ''} ({human(totals.already_stored_bytes)}) already stored, nothing sent")
    return "; ".join(parts) or "nothing uploaded"


class PushSummary:
    """This agent's part of a push (or, with operation "download", of a clone or fetch: files
    written and bytes fetched in `sent_bytes`); `close` reports it and, if last, tells the user
    the sum."""

    def __init__(self, state_dir: Path, operation: str = "upload") -> None:
        self.path = state_dir / LOG_NAME
        self.operation = operation
        self.totals = PushTotals()
        self._registered = False
        self._push: str | None = None

    @property
    def push(self) -> str:
        """The id this push's agents share: their git-lfs process's. Asked once, by an agent that
        uploads (without /proc that costs a `ps`); the parent's pid is a last resort only, since
        each agent has its own `sh -c` parent: with it every agent reported a push of its own
        (one summary line per agent, and `git xet stats` counting one agent's files)."""
        if self._push is None:
            self._push = lfs_process_id(may_spawn=True) or str(os.getppid())
        return self._push

    def _append(self, record: dict) -> list[dict]:
        """Append under an exclusive lock; returns this push's records."""
        from ..platform.locks import lock_file
        from ..platform.private_paths import open_private_append, private_dirs

        private_dirs(self.path.parent.parent, self.path.parent.name, own_base=False)  # not .git itself
        with open_private_append(self.path, read=True) as log:
            lock_file(log.fileno())
            log.write(json.dumps(record) + "\n")
            log.flush()
            log.seek(0)
            lines = log.readlines()
            if log.tell() > _KEEP_BYTES:
                log.truncate(0)
                log.writelines(lines[len(lines) // 2 :])
        mine = []
        for line in lines:
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("push") == self.push and entry.get("op", "upload") == self.operation:
                mine.append(entry)
        return mine

    def started(self) -> None:
        if not self._registered:
            self._registered = True
            self._append({"push": self.push, "op": self.operation, "pid": os.getpid(), "event": "start", "time": time.time()})

    def close(self) -> str | None:
        """Report this agent's totals; the summary line when this agent is the push's last."""
        if not self._registered:
            return None
        mine = self._append({"push": self.push, "op": self.operation, "pid": os.getpid(), "event": "done", "time": time.time(), **self.totals.as_dict()})
        started = {e["pid"] for e in mine if e.get("event") == "start"}
        done = [e for e in mine if e.get("event") == "done"]
        if started != {e["pid"] for e in done}:
            return None
        total = PushTotals()
        for entry in done:
            total.add(PushTotals.from_entry(entry))
        if self.operation == "download":
            return describe_download(total) if total.files else None
        return describe(total) if total.files or total.already_stored else None  # a failed push: its errors say enough


def last_push(state_dir: Path) -> PushTotals | None:
    """The sum of the most recent push's reports (for `git xet stats`)."""
    try:
        lines = (state_dir / LOG_NAME).read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    entries = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("event") == "done" and entry.get("op", "upload") == "upload":
            entries.append(entry)
    if not entries:
        return None
    push = entries[-1]["push"]
    total = PushTotals()
    for entry in entries:
        if entry["push"] == push:
            total.add(PushTotals.from_entry(entry))
    return total
