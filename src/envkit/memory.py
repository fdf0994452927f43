"""Giving memory back to the operating system once a burst of sessions has closed.

A closed connection leaves a reference cycle behind in uvicorn's protocol objects, so its
memory waits for the next full garbage collection, which an idle server may never run; and
the C allocator keeps freed pages unless asked to return them.
"""

from __future__ import annotations

import ctypes
import gc
from typing import Callable

__all__ = ["release_memory"]

_malloc_trim: Callable[[int], int] | None = None
_looked_up = False


def release_memory() -> None:
    """Collect cyclic garbage, then return free heap pages to the OS (glibc's `malloc_trim`, where present)."""
    global _malloc_trim, _looked_up
    gc.collect()
    if not _looked_up:
        _looked_up = True
        _malloc_trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if _malloc_trim is not None:
        _malloc_trim(0)
