"""Warm pools: sandboxes started ahead of time, so that opening one costs no start-up.

One pool per (backend, limits, image). Taking a sandbox hands out a started one (or starts one at once when none
is ready) and starts a replacement on a thread of the pool's own. A pool grows with demand: each take that found it
empty keeps one more waiting, up to the process's warm cap; and shrinks when idle: once no take came for
`ENVKIT_SANDBOX_IDLE_S` (default 60) it closes the sandboxes beyond `ENVKIT_SANDBOX_WARM`. Sandboxes waiting in a
pool end with the process: at exit, and, if it is killed, because their agents see their stdin close.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections import deque
from typing import Callable, Hashable

from .base import CREATION_RATE, Sandbox, SandboxBusyError

__all__ = ["WarmPool", "WARM_SLOTS", "pool_for", "close_pools"]

logger = logging.getLogger("envkit.sandbox")

_pools: dict[Hashable, WarmPool] = {}
_pools_lock = threading.Lock()


def _count(name: str, default: int) -> int:
    value = os.environ.get(name, str(default))
    if not value.isdigit():
        raise ValueError(f"{name} must be a whole number of sandboxes; got {value!r}")
    return int(value)


def idle_s() -> float:
    """Seconds without a take after which a pool that grew shrinks back: `ENVKIT_SANDBOX_IDLE_S`, default 60."""
    value = os.environ.get("ENVKIT_SANDBOX_IDLE_S", "60")
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise ValueError(f"ENVKIT_SANDBOX_IDLE_S must be a positive number of seconds; got {value!r}")
    return seconds


def warm_max() -> int:
    return _count("ENVKIT_SANDBOX_WARM_MAX", 8)


def warm_size() -> int:
    """How many sandboxes each pool keeps started: `ENVKIT_SANDBOX_WARM`, default 2."""
    return _count("ENVKIT_SANDBOX_WARM", 2)


class WarmSlots:
    """The sandboxes all pools of this process keep started and waiting (or are starting) together: at most
    `ENVKIT_SANDBOX_WARM_MAX` (default 8), however many pools there are (a Harbor folder has one per task image)."""

    def __init__(self) -> None:
        self.held = 0
        self._lock = threading.Lock()

    def reserve(self) -> bool:
        with self._lock:
            if self.held >= warm_max():
                return False
            self.held += 1
            return True

    def release(self, count: int = 1) -> None:
        with self._lock:
            self.held -= count


WARM_SLOTS = WarmSlots()


class WarmPool:
    """Started sandboxes of one kind, waiting to be taken."""

    def __init__(self, make: Callable[[], Sandbox], size: int) -> None:
        self._make = make
        #: How many it keeps waiting when idle, and now (grown by demand).
        self.base = self.size = size
        self._taken_at = time.monotonic()
        self._ready: deque[Sandbox] = deque()
        self._lock = threading.Lock()
        self._filling: threading.Thread | None = None
        self._closed = False

    def take(self) -> Sandbox:
        """A ready sandbox: a waiting one, or one started now."""
        sandbox = None
        while sandbox is None:
            with self._lock:
                sandbox = self._ready.popleft() if self._ready else None
            if sandbox is None:
                break
            WARM_SLOTS.release()
            if not sandbox.alive:
                sandbox.close()
                sandbox = None
        with self._lock:
            self._taken_at = time.monotonic()
            if sandbox is None and self._filling is not None and 0 < self.size < warm_max():
                self.size += 1          # demand outran the pool's filling: keep one more waiting
        self._refill()
        return sandbox if sandbox is not None else self._make().start().wait_ready()

    @property
    def waiting(self) -> int:
        return len(self._ready)

    def _refill(self) -> None:
        with self._lock:
            if self._filling is not None or self._closed or len(self._ready) >= self.size:
                return
            self._filling = threading.Thread(target=self._fill, name="envkit-sandbox-warm", daemon=True)
            self._filling.start()

    def _fill(self) -> None:
        try:
            while True:
                with self._lock:
                    if self._closed or len(self._ready) >= self.size:
                        return
                sandbox = self._make()
                if not CREATION_RATE.free(sandbox.CREATE_RATE) or not WARM_SLOTS.reserve():
                    sandbox.close()     # sessions' starts come first, and the process holds as many waiting
                    return              # sandboxes as it may; the next take refills
                try:
                    sandbox.start().wait_ready()
                except BaseException:
                    WARM_SLOTS.release()
                    raise
                with self._lock:
                    if not self._closed:
                        self._ready.append(sandbox)
                        continue
                sandbox.close()
                WARM_SLOTS.release()
                return
        except SandboxBusyError as error:
            logger.info("a warm pool waits for its refill: %s", error)
        except Exception:
            logger.warning("starting a warm sandbox failed; the next one opens cold", exc_info=True)
        finally:
            with self._lock:
                self._filling = None

    def shrink(self) -> None:
        """Back to `base` waiting sandboxes once no take came for `idle_s()`; the ones beyond it are closed."""
        with self._lock:
            if self.size <= self.base or time.monotonic() - self._taken_at < idle_s():
                return
            self.size = self.base
            extra = [self._ready.pop() for _ in range(max(0, len(self._ready) - self.base))]
        WARM_SLOTS.release(len(extra))
        for sandbox in extra:
            sandbox.close()

    def close(self) -> None:
        """End the waiting sandboxes, and the one being started; later takes start sandboxes cold."""
        with self._lock:
            self._closed = True
            waiting, self._ready = list(self._ready), deque()
            filling = self._filling
        WARM_SLOTS.release(len(waiting))
        for sandbox in waiting:
            sandbox.close()
        if filling is not None and filling is not threading.current_thread():
            filling.join()


def pool_for(key: Hashable, make: Callable[[], Sandbox]) -> WarmPool:
    """The warm pool of sandboxes of kind `key` (made by `make`), started on first use."""
    global _shrinker
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = WarmPool(make, warm_size())
        if _shrinker is None:
            _shrinker = threading.Thread(target=_shrink_pools, name="envkit-sandbox-shrink", daemon=True)
            _shrinker.start()
        return pool


_shrinker: threading.Thread | None = None


def _shrink_pools() -> None:
    """Shrink idle pools, looking four times per idle time; ends when no pool is left."""
    global _shrinker
    while True:
        time.sleep(idle_s() / 4)
        with _pools_lock:
            pools = list(_pools.values())
            if not pools:
                _shrinker = None
                return
        for pool in pools:
            pool.shrink()


@atexit.register
def close_pools() -> None:
    """End every waiting sandbox of every pool (at exit, and for tests that count what is left)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()
