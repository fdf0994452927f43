"""The default transport's fast paths, behind one seam: `protocol_classes(limits)`, uvicorn's protocol classes with
envkit's limits and the fast paths this process may use.

Each relies on other projects' private internals, none of which they version, and each is here because it saves at
least a tenth of the server's CPU per step or call it serves (docs/benchmarks.md, `benchmarks/fast_paths_cpu.py`):

- `inline` (`inline`): a `RUN_INLINE` environment's /ws frames answered inside uvicorn's WebSocket protocol; it
  relies on how uvicorn's sans-I/O protocol gathers a message;
- `frames` (`frames`): with `inline`, an open connection's everyday frames read and written without websockets'
  parser; it relies on the layout of that parser and its size limits;
- `at_once` (`at_once`): `/mcp` and ORS requests answered with no ASGI cycle; it relies on uvicorn's httptools
  protocol, its request cycle and `STATUS_LINE`.

Before the first server starts, each is checked by behaviour (`checks`): the protocol classes it builds are fed known
bytes on a private event loop and must write exactly what uvicorn and websockets themselves would. One that does not
is left off: the server then runs uvicorn's and websockets' own code for it, and says so in one INFO line.
`ENVKIT_FAST_PATHS=0` turns them all off; a comma-separated list of their names uses only those.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ...app.settings import FAST_PATHS_ENV, fast_paths_wanted
from ..uvicorn_protocols import HeadLimits
from ..uvicorn_protocols import protocol_classes as limited_classes
from .inline import InlineWebSocket, InlineWebSocketReadingFrames

try:
    from .at_once import AnsweredAtOnce
    AT_ONCE_IMPORT_ERROR: str | None = None
except ImportError as error:   # no httptools, or its uvicorn module changed: `at_once` is off
    AnsweredAtOnce = None  # type: ignore[assignment,misc]
    AT_ONCE_IMPORT_ERROR = str(error)

__all__ = ["FastPaths", "fast_paths", "protocol_classes", "log_fast_paths", "decide_again"]

logger = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class FastPaths:
    """The fast paths in use, and why each one that is not is off (`off`: name -> reason)."""

    frames: bool = False
    inline: bool = False
    at_once: bool = False
    off: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str | None:
        """The one log line for the paths that are off, or None when all are on."""
        if not self.off:
            return None
        reasons = "; ".join(f"{name}: {why}" for name, why in self.off)
        return f"envkit fast paths off, serving them with uvicorn's and websockets' own code ({reasons})"

    def mixins(self) -> tuple[tuple[type, ...], tuple[type, ...]]:
        """The mixins of the paths in use, for uvicorn's HTTP protocol and for its WebSocket protocol."""
        http = (AnsweredAtOnce,) if self.at_once and AnsweredAtOnce is not None else ()
        ws = (InlineWebSocketReadingFrames,) if self.frames else (InlineWebSocket,) if self.inline else ()
        return http, ws


def protocol_classes(limits: HeadLimits) -> tuple[type[asyncio.Protocol], type[asyncio.Protocol]]:
    """uvicorn's `http` and `ws` protocol classes with `limits` and the fast paths in use."""
    return limited_classes(limits, *fast_paths().mixins())


def log_fast_paths() -> None:
    """Log, once per process, which fast paths are off and why (INFO, uvicorn's error log)."""
    line = fast_paths().describe()
    if line is not None and line not in _logged:
        _logged.add(line)
        logger.info(line)


_logged: set[str] = set()


@functools.cache
def fast_paths() -> FastPaths:
    """The fast paths this process uses: each checked once (a few milliseconds), on a private event loop."""
    wanted = fast_paths_wanted()
    if not wanted:
        return FastPaths(off=(("all", f"{FAST_PATHS_ENV}=0"),))
    result: list[FastPaths] = []
    thread = threading.Thread(target=lambda: result.append(_check_all(wanted)), name="envkit-fast-path-checks")
    thread.start()   # a thread of its own: the caller may be inside a running event loop
    thread.join()
    return result[0]


def decide_again() -> None:
    """Forget the decision and its log line: the next server checks again (for tests that change what is checked)."""
    fast_paths.cache_clear()
    _logged.clear()


def _check_all(wanted: frozenset[str]) -> FastPaths:
    from . import checks

    off: list[tuple[str, str]] = []

    def passes(name: str, check: Callable[[], Any]) -> bool:
        if name not in wanted:
            off.append((name, f"not in {FAST_PATHS_ENV}"))
            return False
        return _passes(name, check, off)

    inline = passes("inline", lambda: checks.check_websocket(read_frames=False))
    frames = inline and passes("frames", checks.check_frames)
    at_once = passes("at_once", checks.check_http)
    if not inline and "frames" in wanted:
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
