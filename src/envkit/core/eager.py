"""Running a coroutine now, in the caller's callback, until it first waits: no task for what never waits.

`first_step` runs it that far; `Resumed` continues it under a task from what it waits on; `run_eagerly` does both.
ORS answers a `/call` this way, and the transport's fast paths answer frames and requests this way.
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Generator

__all__ = ["Resumed", "first_step", "run_eagerly"]


def first_step(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run `coro` until it first waits: `(True, result)` if it finished, else `(False, what it waits on)`."""
    try:
        return False, coro.send(None)
    except StopIteration as finished:
        return True, finished.value


def run_eagerly(coro: Coroutine[Any, Any, Any]) -> None:
    """Run `coro` now, as far as it goes without waiting; a task finishes it if it must wait."""
    finished, waiting_on = first_step(coro)
    if not finished:
        asyncio.get_running_loop().create_task(Resumed(coro, waiting_on).run())


class Resumed:
    """A started coroutine, continued under a task from the future it was waiting on."""

    def __init__(self, coro: Coroutine[Any, Any, Any], waiting_on: Any) -> None:
        self.coro, self.waiting_on = coro, waiting_on

    async def run(self) -> Any:
        return await self

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, waiting_on = self.coro, self.waiting_on
        while True:
            try:
                sent = yield waiting_on
            except GeneratorExit:   # the task is being destroyed (its loop closed): close the coroutine with it
                coro.close()
                raise
            except BaseException as error:  # noqa: BLE001 — thrown into the task: pass it on to the coroutine
                try:
                    waiting_on = coro.throw(error)
                except StopIteration as finished:
                    return finished.value
            else:
                try:
                    waiting_on = coro.send(sent)
                except StopIteration as finished:
                    return finished.value
