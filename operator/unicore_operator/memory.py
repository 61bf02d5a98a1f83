"""Give the memory a burst of work freed back to the system.

CPython allocates objects over 512 bytes (event bodies' strings, large dicts and lists) with the C library's
malloc. glibc returns freed memory to the system only from the top of its heaps, so after a burst (an operator
starting with thousands of objects in its watches, a resync of every task) the process stays at the burst's peak
even though the memory is free. ``malloc_trim(0)`` releases every free page inside glibc's heaps. Elsewhere (musl,
macOS) there is no such call, and this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from collections.abc import Callable

from unicore_operator.log import logger


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim: Callable[[int], int] = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


_TRIM = _malloc_trim()


def release_free_memory() -> bool:
    """Collect garbage, then return glibc's free heap pages to the system. True when malloc_trim ran."""
    gc.collect()
    if _TRIM is None:
        return False
    try:
        _TRIM(0)
    except Exception as exc:  # never fatal: the memory stays mapped, as without this
        logger.debug("malloc_trim failed: %s", exc)
        return False
    return True
