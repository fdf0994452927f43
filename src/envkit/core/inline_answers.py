"""Answering a session's frames inside the transport's callback, in order, with no task per frame.

A frame of a `RUN_INLINE` environment is answered without ever waiting, so a transport can answer
it inside the callback that delivered it: no queue, no task switch. `InlineAnswers` does that for
one session and falls back to a task only for a frame whose answer must wait (an environment that
returns an awaitable); frames that arrive meanwhile wait their turn, and past `MAX_WAITING_FRAMES`
of them the connection is not read until they are answered. Reading also stops while the client
does not take its replies (the transport's write buffer is over its high-water mark).

The server's WebSocket protocol uses it for the sessions of `RUN_INLINE` environments
(`uvicorn_protocols`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, Generator, Protocol

from ..protocol import CloseCode, Features
from .sessions import Session

__all__ = ["FrameHandler", "InlineAnswers", "first_step", "run_eagerly", "MAX_WAITING_FRAMES"]


class FrameHandler(Protocol):
    """What answers a session's frames (the WebSocket surface's `SessionHandler`)."""

    def handle(self, session: Session, raw: str | bytes, *, features: Features) -> Coroutine[Any, Any, str | None]: ...

#: Frames of one connection waiting while an earlier one is answered; past this the connection is not read
#: until they are answered (as uvicorn reads a connection's next frame only once the last one was taken).
MAX_WAITING_FRAMES = 16


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


class InlineAnswers:
    """One session's frames answered in order inside the transport's callbacks.

    A transport sets `session` and calls `on_message(raw)` per message, `pause_writing()` and
    `resume_writing()` as its write buffer fills and drains; it implements `send_reply(text)` (write
    one reply frame) and `set_reading(paused)`, and may override `answered_all()`, awaited when the
    task that answered frames which had to wait is done.
    """

    session: Session

    def __init__(self, handler: FrameHandler, features: Features) -> None:
        self.handler = handler
        self.features = features
        #: Messages that arrived while an earlier one was being answered (a list: a few at most, and an empty
        #: list is a tenth of an empty deque's size, per open session).
        self.waiting: list[str | bytes] = []
        self.answering: asyncio.Task[None] | None = None
        self.write_paused = False   # the client does not read its replies fast enough
        self.read_paused = False

    # -- what the transport provides -------------------------------------------------------

    def send_reply(self, reply: str) -> None:
        raise NotImplementedError

    def set_reading(self, paused: bool) -> None:
        """Stop (True) or resume (False) reading the connection (nothing once it is gone)."""
        raise NotImplementedError

    async def answered_all(self) -> None:
        """The task answering frames that had to wait has finished (the session may have ended)."""

    # -- backpressure ------------------------------------------------------------------------

    def pause_writing(self) -> None:
        self.write_paused = True
        self.pace_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.pace_reading()

    def pace_reading(self) -> None:
        pause = self.write_paused or len(self.waiting) >= MAX_WAITING_FRAMES
        if pause is not self.read_paused:
            self.read_paused = pause
            self.set_reading(pause)

    # -- answering -------------------------------------------------------------------------

    def on_message(self, raw: str | bytes) -> None:
        """Answer one message, after those that came before it; none once the session has ended."""
        if self.answering is not None:
            self.waiting.append(raw)
            if len(self.waiting) >= MAX_WAITING_FRAMES:
                self.pace_reading()
            return
        session = self.session
        if session.ended is not None:
            return
        coro = self.handler.handle(session, raw, features=self.features)
        finished, outcome = first_step(coro)
        if not finished:
            self.answering = asyncio.get_running_loop().create_task(self._answer_in_order(coro, outcome))
        elif not self._send(outcome):
            run_eagerly(session.end(CloseCode.NORMAL, "session closed"))

    async def _answer_in_order(self, started: Coroutine[Any, Any, str | None], waiting_on: Any) -> None:
        """Finish answering a frame that had to wait, then the frames that arrived meanwhile, in order."""
        try:
            reply = await Resumed(started, waiting_on)
            while self._send(reply):
                if self.read_paused:
                    self.pace_reading()
                if not self.waiting:
                    return
                reply = await self.handler.handle(self.session, self.waiting.pop(0), features=self.features)
            self.waiting.clear()
            await self.session.end(CloseCode.NORMAL, "session closed")
        finally:
            self.answering = None
            await self.answered_all()

    def _send(self, reply: str | None) -> bool:
        """Send a reply; False when the session is over (the client sent `close`, or it was ended)."""
        if reply is None or self.session.ended is not None:
            return False
        self.send_reply(reply)
        return True
