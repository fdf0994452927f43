"""Which of the default transport's fast paths this process may use, decided once by trying them.

The default transport (uvicorn) is faster than uvicorn alone through code that relies on other projects'
private internals, none of which they version:

- `frames`: `envkit.transport.ws_frames` reads and writes an open connection's everyday WebSocket frames (it relies
  on the layout of websockets' sans-I/O parser and its size limits);
- `inline`: a `RUN_INLINE` environment's frames are answered inside uvicorn's WebSocket protocol
  (`uvicorn_protocols._InlineWebSocket`: it relies on how uvicorn's sans-I/O protocol gathers a message);
- `at_once`: `/mcp` and ORS requests answered without an ASGI cycle, one keep-alive timer per idle spell and
  whole responses in one write (`envkit.transport.http_at_once`, `uvicorn_protocols`: they rely on uvicorn's
  httptools protocol, its request cycle and `STATUS_LINE`).

Before the first server starts, each is checked by behaviour: the protocol classes it builds are fed known
bytes (a handshake, masked, fragmented and control frames, pipelined and repeated requests, a body split across
reads) on a private event loop, and must write exactly what uvicorn and websockets themselves would. One that
does not is left off: the server then runs uvicorn's and websockets' own code for it, and says so in one INFO
line. `ENVKIT_FAST_PATHS=0` turns them all off.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from typing import Any, Callable

from ..app.settings import FAST_PATHS_ENV, fast_paths_wanted
from .uvicorn_protocols import FastPaths

__all__ = ["FastPaths", "fast_paths", "log_fast_paths", "decide_again", "FAST_PATHS_ENV"]

logger = logging.getLogger("uvicorn.error")


@functools.cache
def fast_paths() -> FastPaths:
    """The fast paths this process uses: each checked once (a few milliseconds), on a private event loop."""
    if not fast_paths_wanted():
        return FastPaths(off=(("all", f"{FAST_PATHS_ENV}=0"),))
    result: list[FastPaths] = []
    thread = threading.Thread(target=lambda: result.append(_check_all()), name="envkit-fast-path-checks")
    thread.start()   # a thread of its own: the caller may be inside a running event loop
    thread.join()
    return result[0]


_logged: set[str] = set()


def log_fast_paths(paths: FastPaths) -> None:
    """Log, once per process, which fast paths are off and why (INFO, uvicorn's error log)."""
    line = paths.describe()
    if line is not None and line not in _logged:
        _logged.add(line)
        logger.info(line)


def decide_again() -> None:
    """Forget the decision and its log line: the next server checks again (for tests that change what is checked)."""
    fast_paths.cache_clear()
    _logged.clear()


def _check_all() -> FastPaths:
    from . import fast_path_checks as checks

    off: list[tuple[str, str]] = []
    inline = _passes("inline", lambda: checks.check_websocket(read_frames=False), off)
    frames = inline and _passes("frames", checks.check_frames, off)
    at_once = _passes("at_once", checks.check_http, off)
    if not inline:
        off.append(("frames", "it needs inline answers"))
    return FastPaths(frames=frames, inline=inline, at_once=at_once, off=tuple(off))


def _passes(name: str, check: Callable[[], Any], off: list[tuple[str, str]]) -> bool:
    loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        check()
        return True
    except Exception as error:  # noqa: BLE001 — whatever broke, the standard path serves instead
        off.append((name, f"{type(error).__name__}: {error}"[:300]))
        return False
    finally:
        left = asyncio.all_tasks(loop)   # a check that failed half-way may leave its app's task waiting
        for task in left:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        asyncio.set_event_loop(None)
        loop.close()
