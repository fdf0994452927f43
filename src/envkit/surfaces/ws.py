"""The WebSocket endpoint: one session per connection, frames answered in order.

`SessionHandler` answers a connection's frames over the sessions `ServedEnv` opens (`envkit.core.served_env`);
its `__call__` is the Starlette/uvicorn connection lifecycle.

Every bad frame is answered with an error frame and the session carries on; only capacity,
a failing environment factory, idle reaping and shutdown end a session from the server side,
each with a close code that says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import ValidationError
from starlette.types import Receive, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..core.served_env import INLINE_FRAMES, InlineFrames, Refusal, ServedEnv, summarise_validation_error
from ..core.sessions import Session
from ..environment import Observation
from ..protocol import (
    FEATURES_HEADER,
    REFUSED_HEADER,
    Features,
    SESSION_ID_HEADER,
    call_tool_frame,
    CloseCode,
    ErrorCode,
    FrameError,
    decode_frame,
    error_frame,
    observation_frame,
    state_frame,
    tool_result_frame,
)


logger = logging.getLogger("envkit.server")

#: `/ws?session_id=ID` attaches the socket to a session opened over HTTP (`/mcp`'s `openenv/session/create`),
#: as OpenEnv's MCP client does, so reset/step on the socket and tool calls over HTTP play one game.
ATTACH_PARAMETER = "session_id"

__all__ = ["SessionHandler", "ATTACH_PARAMETER"]



class SessionHandler:
    """Serves `/ws`: builds an environment per connection and answers its frames."""

    def __init__(self, served: ServedEnv) -> None:
        self.served = served
        self.pool = served.pool

    async def __call__(self, websocket: WebSocket) -> None:
        """Serve one Starlette/uvicorn connection, from handshake to close."""
        await self.serve(websocket, websocket.receive, websocket.send, direct=False)

    async def serve(self, websocket: WebSocket, receive: Receive, send: Send, *, direct: bool = True) -> None:
        """`__call__`, with the session's frames taken from `receive` and answered through `send`.

        `EnvkitApp` passes the connection's raw ASGI channels here (`direct`): Starlette's checks on every
        message (`websocket.receive`, `send_text`) cost more per step than the handshake's once, and the
        transport may then answer the frames of `RUN_INLINE` environments itself (`INLINE_FRAMES`). Through
        the ordinary route (an app with middleware), every frame goes through `receive` and `send`.
        """
        if websocket.scope.get("query_string") and ATTACH_PARAMETER in websocket.query_params:
            await self._serve_attached(websocket, websocket.query_params[ATTACH_PARAMETER])
            return
        pool = self.pool
        client: str | None = None
        if pool.max_sessions_per_client is not None:
            peer = websocket.scope.get("client")
            client = self.served.access.client_address(peer[0] if peer else None, websocket.headers)
            if not pool.hold_client(client):
                await _refuse(websocket, self.served.client_refusal(client))
                return
        try:
            await self._serve(websocket, receive, send, direct)
        finally:
            if client is not None:
                pool.drop_client(client)

    async def _serve(self, websocket: WebSocket, receive: Receive, send: Send, direct: bool) -> None:
        pool = self.pool
        if not pool.try_reserve() and not await pool.wait_for_slot():
            await _refuse(websocket, self.served.refusal())
            return
        session: Session | None = None
        inline: InlineFrames | None = None
        try:
            try:
                env = await self.served.build_for_session()
            except Exception as error:
                await _refuse(websocket, self.served.factory_refusal(error))
                return

            async def close_socket(code: int, reason: str) -> None:
                await websocket.close(code, reason)

            session = Session(pool, env, close_socket)
            await websocket.accept(headers=[(SESSION_ID_HEADER.encode(), session.id.encode())])
            pool.add(session)
            features = Features.parse(websocket.headers.get(FEATURES_HEADER, ""),
                                      websocket.scope.get("query_string", b""))
            extensions = websocket.scope.get("extensions") or {}
            answer_inline = extensions.get(INLINE_FRAMES) if direct and self.served.inline_factory else None
            if answer_inline is not None:   # the transport answers frames in its own callbacks from now on
                inline = answer_inline(self.handle, session, features)
            while session.ended is None:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text")
                if raw is None:
                    raw = message.get("bytes") or b""
                if inline is not None:   # a frame queued before the transport took over
                    inline.on_message(raw)
                    continue
                reply = await self.handle(session, raw, features=features)
                if reply is None or session.ended is not None:
                    return
                await send({"type": "websocket.send", "text": reply})
        except (WebSocketDisconnect, OSError):   # the client went away while its reply was being sent: nothing to log
            return
        finally:
            try:
                if inline is not None and inline.answering is not None:   # a frame that had to wait finishes first
                    await asyncio.wait({inline.answering})
                if session is not None:
                    await session.end(CloseCode.NORMAL, "session closed")
            finally:
                pool.release()

    async def _serve_attached(self, websocket: WebSocket, session_id: str) -> None:
        """Serve a socket attached to a detached session: it takes no slot of its own and, when it
        closes, leaves the session open (it ends by `openenv/session/close`, idle reaping or shutdown)."""
        session = self.pool.get(session_id)
        refusal = self.attach_refusal(session_id, session)
        if refusal is not None:
            await _refuse(websocket, refusal)
            return
        assert session is not None

        async def close_socket(code: int, reason: str) -> None:
            await websocket.close(code, reason)

        session.close_socket = close_socket   # reaping and shutdown now close this socket with their code
        try:
            await websocket.accept(headers=[(SESSION_ID_HEADER.encode(), session.id.encode())])
            features = Features.parse(websocket.headers.get(FEATURES_HEADER, ""),
                                      websocket.scope.get("query_string", b""))
            while session.ended is None:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text")
                async with session.in_use():   # one request at a time with the session's HTTP calls
                    if session.ended is not None:
                        return
                    reply = await self.answer(session, raw if raw is not None else message.get("bytes") or b"",
                                              features=features)
                if session.ended is not None:
                    return
                if reply is None:
                    await websocket.close(CloseCode.NORMAL, "detached; the session stays open")
                    return
                await websocket.send_text(reply)
        except WebSocketDisconnect:   # the client went away while its reply was being sent
            return
        finally:
            if session.close_socket is close_socket:
                session.close_socket = None

    def attach_refusal(self, session_id: str, session: Session | None) -> Refusal | None:
        """Why a socket cannot attach to session `session_id`, or None when it can."""
        if session is None:
            ended = self.pool.ended(session_id)
            message = (f"session {session_id} is gone ({ended[1]}); open a new one" if ended is not None
                       else f"unknown session {session_id}; open one with openenv/session/create on /mcp")
        elif not session.owns_slot or session.close_socket is not None:
            message = f"session {session_id} already has a WebSocket attached; close that one first"
        else:
            return None
        return Refusal("session", error_frame(ErrorCode.SESSION_UNAVAILABLE, message), CloseCode.SESSION_UNAVAILABLE,
                       "session unavailable", message)

    async def handle(self, session: Session, raw: str | bytes, *, features: Features) -> str | None:
        """`answer`, with the bookkeeping the idle reaper reads (busy while answering, last activity)."""
        session.busy = True
        try:
            return await self.answer(session, raw, features=features)
        finally:
            session.busy = False
            session.last_active = time.monotonic()

    async def answer(self, session: Session, raw: str | bytes, *, features: Features = Features()) -> str | None:
        """The reply frame to one client frame, or None when the client asked to close.

        `features`: what the client asked for in the handshake (`"text"`, `"metrics"` in reply frames).
        Every frame is counted in the server's metrics by type, with the time its answer took.
        """
        metrics = self.pool.metrics
        started = time.perf_counter()
        kind = "invalid"
        try:
            size = len(raw) if isinstance(raw, bytes) or raw.isascii() else len(raw.encode())   # the limit is in bytes
            if size > self.served.max_message_bytes:
                raise FrameError(ErrorCode.MESSAGE_TOO_BIG, f"message of {size} bytes exceeds the server's limit of "
                                 f"{self.served.max_message_bytes} bytes; send smaller actions")
            kind, data = decode_frame(raw)
            if kind == "step":
                if self.served.is_tool_call(data):
                    return await self._tool_step(session, data)
                observation = self._checked(await session.step(self.served.action(session, data)), "step")
                return observation_frame(observation, with_text=features.text,
                                         metrics=self._metrics(session, features) if features.metrics else None)
            if kind == "call":
                return await self._call(session, data, features)
            if kind == "reset":
                observation = self._checked(await session.reset(self.served.reset_kwargs(data)), "reset")
                return observation_frame(observation, with_text=features.text, metrics=self._metrics(session, features))
            if kind == "state":
                return state_frame(await session.state())
            if kind == "close":
                return None
            raise FrameError(ErrorCode.UNKNOWN_TYPE,
                             f"Unknown message type: {kind}; expected reset, step, state, call or close")
        except FrameError as error:
            return self._client_error(error.code, error.message)
        except ValidationError as error:
            problems = summarise_validation_error(error)
            return self._client_error(ErrorCode.VALIDATION_ERROR, f"Invalid message: {problems}",
                                      errors=error.errors(include_url=False, include_context=False, include_input=False))
        except Exception as error:
            # at most a line a minute: a client can make an environment raise on every frame it sends
            metrics.environment_raised(session.id, error)
            metrics.error_reply(ErrorCode.EXECUTION_ERROR)
            return error_frame(ErrorCode.EXECUTION_ERROR, f"{type(error).__name__}: {error}")
        finally:
            metrics.answered(kind, time.perf_counter() - started)

    def _client_error(self, code: str, message: str, **details: Any) -> str:
        """The error frame for a client's mistake, counted as bad input (and logged at most once a minute per code)."""
        metrics = self.pool.metrics
        metrics.error_reply(code)
        metrics.bad_client_input(code.lower(), message)
        return error_frame(code, message, **details)

    def _metrics(self, session: Session, features: Features) -> dict[str, Any] | None:
        """The episode metrics for a client that asked for them, from an environment that declares some."""
        if not (features.metrics and self.served.has_metrics):
            return None
        return dict(session.env.episode_metrics())

    async def _call(self, session: Session, data: Any, features: Features) -> str:
        if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             'Invalid call: expected {"type": "call", "data": {"tool": name, "args": {...}}}')
        spec = self.served.tools.get(data["tool"])
        if spec is None:
            known = ", ".join(sorted(self.served.tools)) or "none"
            raise FrameError(ErrorCode.UNKNOWN_TOOL, f"Unknown tool: {data['tool']}; this environment's tools: {known}")
        if not session.may_step:
            raise FrameError(ErrorCode.NOT_RESET, 'tool call before reset: send {"type": "reset"} first')
        arguments = data.get("args") or {}
        if not isinstance(arguments, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR, f'Invalid call: "args" of {spec.name} must be a JSON object')
        result = await session.call_tool(spec, spec.validate_arguments(arguments))
        return tool_result_frame(spec.name, result, metrics=self._metrics(session, features))

    async def _tool_step(self, session: Session, data: dict[str, Any]) -> str:
        """OpenEnv's `CallToolAction` as a step: run the named tool (a service tool without a reset) and answer
        with OpenEnv's `CallToolObservation`; a call that cannot run says why in its `error`, as OpenEnv's MCP
        environments answer, and the session carries on."""
        name, arguments = data.get("tool_name"), data.get("arguments", {})
        served = self.served
        spec = (served.tools.get(name) or served.service_tools.get(name)) if isinstance(name, str) else None
        if spec is None:
            known = ", ".join(sorted([*served.tools, *served.service_tools])) or "none"
            return call_tool_frame(name, error=("tool_not_found", f"Unknown tool: {name!r}; this environment's "
                                                                  f"tools: {known}"))
        if not isinstance(arguments, dict):
            return call_tool_frame(name, error=("invalid_args", f'"arguments" of {name} must be a JSON object'))
        try:
            checked = spec.validate_arguments(arguments)
        except ValidationError as error:
            return call_tool_frame(name, error=("invalid_args", f"Invalid arguments for {name}: "
                                                                f"{summarise_validation_error(error)}"))
        if name in served.tools and not session.may_step:
            return call_tool_frame(name, error=("execution_error", f"tool call before reset: {name} needs a started "
                                                                   'episode; send {"type": "reset"} first'))
        try:
            result = await session.call_tool(spec, checked)
        except Exception as error:
            self.pool.metrics.environment_raised(session.id, error)
            return call_tool_frame(name, error=("execution_error", f"{type(error).__name__}: {error}"))
        return call_tool_frame(name, result)

    @staticmethod
    def _checked(observation: Any, method: str) -> Observation:
        if not isinstance(observation, Observation):
            raise TypeError(f"{method}() returned {type(observation).__name__}, expected an Observation")
        return observation


async def _refuse(websocket: WebSocket, refusal: Refusal) -> None:
    await websocket.accept(headers=[(REFUSED_HEADER.encode(), refusal.kind.encode())])
    await websocket.send_text(refusal.frame)
    await websocket.close(refusal.code, refusal.reason)
