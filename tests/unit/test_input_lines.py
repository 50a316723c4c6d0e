"""agent/stdio.py's InputLines: the lines of a descriptor, however the writer split its bytes,
and exactly the bytes not yet consumed (what an agent hands to its worker, handover.py)."""

from __future__ import annotations

import os
import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from git_xet.agent.stdio import InputLines

_LINES = st.lists(st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=["Cs"]), max_size=40), min_size=1, max_size=12)


def _write_in_pieces(fd: int, data: bytes, cuts: list[int]) -> threading.Thread:
    def write() -> None:
        at = 0
        for cut in [*sorted({c % (len(data) + 1) for c in cuts}), len(data)]:
            os.write(fd, data[at:cut])
            at = cut
        os.close(fd)

    thread = threading.Thread(target=write)
    thread.start()
    return thread


@settings(max_examples=60, deadline=None)
@given(lines=_LINES, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=8), taken=st.integers(min_value=0, max_value=12), pending=st.binary(max_size=20).filter(lambda b: b"\n" not in b))
def test_lines_come_whole_and_the_unread_rest_is_exact(lines: list[str], cuts: list[int], taken: int, pending: bytes) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    read_end, write_end = os.pipe()
    writer = _write_in_pieces(write_end, data, cuts)
    try:
        reader = InputLines(read_end, pending)
        expected = [(pending.decode("utf-8", "replace") if i == 0 else "") + line + "\n" for i, line in enumerate(lines)]
        taken = min(taken, len(lines))
        got = [next(reader) for _ in range(taken)]
        assert got == expected[:taken]
        stream = pending + data
        consumed = sum(len(line.encode()) + 1 for line in lines[:taken]) + (len(pending) if taken else 0)
        assert stream[consumed:].startswith(reader.unread())  # the bytes right after the lines taken
        writer.join()
        assert list(reader) == expected[taken:]  # and nothing is lost after unread()
        assert reader.unread() == b""
    finally:
        writer.join()
        os.close(read_end)


def test_a_last_line_without_newline_is_still_a_line() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"event":"init"}\n{"event":"terminate"}')
    os.close(write_end)
    try:
        assert list(InputLines(read_end)) == ['{"event":"init"}\n', '{"event":"terminate"}']
    finally:
        os.close(read_end)
