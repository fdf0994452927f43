"""Giving memory back to the operating system once a burst of sessions has closed.

A closed connection leaves a reference cycle behind in uvicorn's protocol objects, so its
memory waits for the next full garbage collection, which an idle server may never run; and
the C allocator keeps freed pages unless asked to return them.

CPython's own small-object allocator (pymalloc) frees an arena only when every object in it
is gone, so a few objects that outlive a burst of sessions keep most of the burst's memory.
`envkit serve` therefore runs on the C allocator (`PYTHONMALLOC=malloc`), whose free pages
`malloc_trim` hands back; stepping is no slower on it.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from typing import Callable, Sequence

__all__ = ["release_memory", "rerun_on_system_allocator"]

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


def rerun_on_system_allocator(args: Sequence[str]) -> None:
    """Re-execute this `envkit serve` process with `PYTHONMALLOC=malloc`, unless PYTHONMALLOC is already set.

    `args` are the command-line arguments after the program name; only a `serve` command that
    is not asking for help is re-executed (same process id, same command line).
    """
    if (os.name != "posix" or "PYTHONMALLOC" in os.environ or not args or args[0] != "serve"
            or any(arg in ("-h", "--help") for arg in args)):
        return
    os.environ["PYTHONMALLOC"] = "malloc"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, *sys.orig_argv[1:]])
