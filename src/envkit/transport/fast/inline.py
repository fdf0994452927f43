"""The fast paths `inline` and `frames`: a `RUN_INLINE` environment's /ws frames answered inside uvicorn's WebSocket
protocol, in order, with no queue, task or task switch per frame; with `frames`, its everyday frames read and written
by `frames` instead of websockets.

A frame of a `RUN_INLINE` environment is answered without ever waiting, so it can be answered inside the callback
that delivered it. `InlineAnswers` does that for one session and falls back to a task only for a frame whose answer
must wait (an environment that returns an awaitable); frames that arrive meanwhile wait their turn, and past
`MAX_WAITING_FRAMES` of them the connection is not read until they are answered. Reading also stops while the
client does not take its replies (the transport's write buffer is over its high-water mark).

`InlineWebSocket` offers this to the app at the handshake (the scope extension `INLINE_FRAMES`); once the /ws surface
takes it, each message goes straight to the session's `InlineAnswers` instead of through the ASGI queue, and each
reply is written at once. Disconnects and closes still reach the app through the queue. It relies on how uvicorn's
sans-I/O protocol gathers a message (`frames`, `curr_msg_data_type`, `send_receive_event_to_app`).
"""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine

from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode

from ...core.eager import Resumed, first_step, run_eagerly
from ...core.served_env import INLINE_FRAMES, FrameAnswerer
from ...core.sessions import Session
from ...protocol import CloseCode, Features
from .frames import BINARY, PING, PONG, TEXT, FrameReader, between_frames, frame_size_limit, server_frame

__all__ = ["InlineAnswers", "InlineWebSocket", "InlineWebSocketReadingFrames", "MAX_WAITING_FRAMES"]

#: Frames of one connection waiting while an earlier one is answered; past this the connection is not read
#: until they are answered (as uvicorn reads a connection's next frame only once the last one was taken).
MAX_WAITING_FRAMES = 16


class InlineAnswers:
    """One session's frames answered in order inside the WebSocket protocol's callbacks.

    The protocol calls `on_message(raw)` per message, `pause_writing()` and `resume_writing()` as its write buffer
    fills and drains.
    """

    def __init__(self, protocol: InlineWebSocket, answer: FrameAnswerer, session: Session, features: Features) -> None:
        self.protocol = protocol
        self.answer = answer
        self.session = session
        self.features = features
        #: Messages that arrived while an earlier one was being answered (a list: a few at most, and an empty
        #: list is a tenth of an empty deque's size, per open session).
        self.waiting: list[str | bytes] = []
        self.answering: asyncio.Task[None] | None = None
        self.write_paused = False   # the client does not read its replies fast enough
        self.read_paused = False

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
            transport = self.protocol.transport
            if transport.is_closing():
                return
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

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
        coro = self.answer(session, raw, features=self.features)
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
                reply = await self.answer(self.session, self.waiting.pop(0), features=self.features)
            self.waiting.clear()
            await self.session.end(CloseCode.NORMAL, "session closed")
        finally:
            self.answering = None

    def _send(self, reply: str | None) -> bool:
        """Send a reply; False when the session is over (the client sent `close`, or it was ended)."""
        if reply is None or self.session.ended is not None:
            return False
        self.protocol.send_text_now(reply)
        return True


class InlineWebSocket:
    """Mixin for uvicorn's sans-I/O WebSocket protocol: offers `INLINE_FRAMES` at the handshake and, once it is
    taken, hands each message to the session's `InlineAnswers` (reading frames with `FrameReader` when
    `read_frames`: the fast path `frames`; websockets gets every other frame, from the first one on)."""

    read_frames = False
    conn: Any
    scope: Any
    response: Any
    transport: Any
    frames: list[bytes]
    curr_msg_data_type: str
    close_sent: bool
    writable: asyncio.Event
    logger: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.inline: InlineAnswers | None = None
        self.frame_reader: FrameReader | None = None

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)  # type: ignore[misc]
        if self.response.status_code == 101:
            self.scope["extensions"][INLINE_FRAMES] = self.answer_inline

    def answer_inline(self, answer: FrameAnswerer, session: Session, features: Features) -> InlineAnswers:
        """From now on, answer `session`'s frames inside `data_received` (the `INLINE_FRAMES` extension)."""
        self.inline = answers = InlineAnswers(self, answer, session, features)
        if not self.writable.is_set():
            answers.pause_writing()
        conn = self.conn
        if self.read_frames and not conn.extensions and not self.close_sent and between_frames(conn):
            self.frame_reader = FrameReader(frame_size_limit(conn), self.on_frame, self.read_through_websockets)
        return answers

    def data_received(self, data: bytes) -> None:
        reader = self.frame_reader
        if reader is None:
            super().data_received(data)  # type: ignore[misc]
        elif self.close_sent:   # past the close: websockets reads on until the client's close frame
            self.read_through_websockets(reader.pending + data)
        else:
            reader.feed(data)

    def read_through_websockets(self, data: bytes) -> None:
        """Hand the connection back to websockets from `data` on (`FrameReader`'s `hand_over`)."""
        self.frame_reader = None
        if data:
            super().data_received(data)  # type: ignore[misc]

    def on_frame(self, first_byte: int, payload: bytes) -> bool:
        """One frame read by `FrameReader`; False once websockets must read the rest."""
        if self.close_sent or self.transport.is_closing():
            return False
        answers = self.inline
        assert answers is not None
        if first_byte == TEXT:
            try:
                text = payload.decode()
            except UnicodeDecodeError:
                self.close_invalid_utf8()
                return False
            answers.on_message(text)
        elif first_byte == BINARY:
            answers.on_message(payload)
        elif first_byte == PING:
            self.transport.write(server_frame(PONG, payload))
        else:
            self.handle_pong(Frame(Opcode.PONG, payload))  # type: ignore[attr-defined]
        return True

    def send_receive_event_to_app(self) -> None:
        answers = self.inline
        if answers is None:
            super().send_receive_event_to_app()  # type: ignore[misc]
            return
        frames = self.frames
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        self.frames = []
        if self.close_sent:   # past the close: drop it, and keep reading until the client's close frame comes
            return
        if self.curr_msg_data_type == "text":
            try:
                text = data.decode()
            except UnicodeDecodeError:
                self.close_invalid_utf8()
                return
            answers.on_message(text)
        else:
            answers.on_message(data)

    def close_invalid_utf8(self) -> None:
        """A text message that is not UTF-8: close 1007, as uvicorn does."""
        self.logger.exception("Invalid UTF-8 sequence received from client.")
        self.conn.send_close(1007)
        self.handle_parser_exception()  # type: ignore[attr-defined]

    def send_text_now(self, text: str) -> None:
        """Write one text frame at once (a reply answered inline); nothing once the connection is closing."""
        if self.close_sent or self.transport.is_closing():
            return
        if self.frame_reader is not None:   # websockets has seen nothing past the handshake: the connection is open
            self.transport.write(server_frame(TEXT, text.encode()))
            return
        try:
            self.conn.send_text(text.encode())
        except InvalidState:   # the client's close frame came first
            return
        self.transport.write(b"".join(self.conn.data_to_send()))

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self.inline is not None:
            self.inline.pause_writing()

    def resume_writing(self) -> None:
        super().resume_writing()  # type: ignore[misc]
        if self.inline is not None:
            self.inline.resume_writing()


class InlineWebSocketReadingFrames(InlineWebSocket):
    """`InlineWebSocket` with the fast path `frames`."""

    read_frames = True
