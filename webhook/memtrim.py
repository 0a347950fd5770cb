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


_M_MMAP_THRESHOLD, _M_ARENA_MAX = -3, -8  # mallopt parameters (glibc malloc.h)
_MMAP_THRESHOLD = 128 << 10  # glibc's initial value, kept fixed


def tune_malloc() -> bool:
    """Two glibc settings for a process that holds a large, long-lived inventory and parses
    large transient buffers (list pages, watch lines) in worker threads:

    - threads share the main arena instead of one arena each, which would keep freed pages
      of its own (the GIL already serialises their allocations: no parallelism is lost);
    - a fixed mmap threshold: glibc raises it after each large block freed, up to 32 MiB, so
      later page buffers would come from the heap and leave it fragmented; fixed, they are
      mapped and handed back whole.

    Together about 16 MB less at 5,000 nodes + 150,000 pods (bench/served/inventory.py). Call before
    threads start. False where the C library has no mallopt (musl)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_ARENA_MAX, 1)) and bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD))


trim = malloc_trim()  # None without glibc


def release() -> None:
    """Collect cycles, then trim: what a list left behind becomes free pages first."""
    gc.collect()
    if trim is not None:
        trim()
