"""Hand freed heap memory back to the system (glibc's malloc_trim) after a large transient
peak, such as a pod list of 150,000 objects parsed page by page."""

from __future__ import annotations

import ctypes
import gc
from collections.abc import Callable


def malloc_trim() -> Callable[[], None] | None:
    """glibc's malloc_trim(0): returns the free pages of every arena to the system (the ones
    between live allocations too). None where the C library has no such call (musl)."""
    try:
        function = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int

    def trim() -> None:
        function(0)

    return trim


_M_ARENA_MAX = -8  # mallopt parameter (glibc malloc.h)


def one_arena() -> bool:
    """Make threads share glibc's main malloc arena instead of one arena each. The worker
    threads that read list pages and watch streams would otherwise each keep an arena of
    freed-but-held pages (about 11 MB at 5,000 nodes + 150,000 pods; bench/inventory.py);
    the GIL already serialises their allocations, so one arena costs no parallelism. Call
    before threads start. False where the C library has no mallopt (musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, 1))


trim = malloc_trim()  # None without glibc


def release() -> None:
    """Collect cycles, then trim: what a list left behind becomes free pages first."""
    gc.collect()
    if trim is not None:
        trim()
