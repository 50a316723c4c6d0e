"""Types of the optional C extension built from _bg4.c (see setup.py)."""

from _typeshed import ReadableBuffer

def lane_popcount_histograms(buffer: ReadableBuffer, /) -> tuple[int, ...]: ...
