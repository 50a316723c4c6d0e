"""Types of the optional C extension built from _merkle.c (see setup.py)."""

from collections.abc import Sequence

from _typeshed import ReadableBuffer

def merge_level(hashes: ReadableBuffer, sizes: Sequence[int], /) -> tuple[list[bytes], list[int]]: ...
