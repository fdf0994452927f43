"""The WebSocket endpoint: one session per connection, frames answered in order.

Every bad frame is answered with an error frame and the session carries on; only capacity,
a failing environment factory, idle reaping and shutdown end a session from the server side,
each with a close code that says why.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any, Callable

from pydantic import ValidationError
from starlette.websockets import WebSocket

from .environment import Action, Environment, Observation
from .protocol import (
    FEATURES_HEADER,
    REFUSED_HEADER,
    SESSION_ID_HEADER,
    CloseCode,
    ErrorCode,
    FrameError,
    decode_frame,
    error_frame,
    observation_frame,
    state_frame,
    tool_result_frame,
)
from .sessions import Session, SessionPool
from .tools import ToolSpec

logger = logging.getLogger("envkit.server")

__all__ = ["SessionHandler"]


def reset_parameters(env_class: type[Environment]) -> frozenset[str] | None:
    """Names `reset` accepts, or None when it takes `**kwargs` (then every key is passed on)."""
    method = env_class.reset_async if env_class.reset_async is not Environment.reset_async else env_class.reset
    names = set()
    for param in list(inspect.signature(method).parameters.values())[1:]:
        if param.kind is param.VAR_KEYWORD:
            return None
        names.add(param.name)
    return frozenset(names)


class SessionHandler:
    """Serves `/ws`: builds an environment per connection and answers its frames."""

    def __init__(self, factory: Callable[[], Environment], env_class: type[Environment], action_cls: type[Action],
                 tools: dict[str, ToolSpec], pool: SessionPool, max_message_bytes: int) -> None:
        self.factory = factory
        self.action_cls = action_cls
        self.tools = tools
        self.pool = pool
        self.max_message_bytes = max_message_bytes
        self.reset_names = reset_parameters(env_class)
        self.inline_factory = env_class.RUN_INLINE

    async def __call__(self, websocket: WebSocket) -> None:
        pool = self.pool
        if not pool.try_reserve():
            await self._refuse(websocket)
            return
        session: Session | None = None
        try:
            try:
                env = self.factory() if self.inline_factory else await pool.run_in_worker(self.factory)
            except Exception as error:
                logger.exception("environment factory failed")
                await websocket.accept(headers=[(REFUSED_HEADER.encode(), b"factory")])
                await websocket.send_text(error_frame(ErrorCode.FACTORY_ERROR,
                                                      f"could not create the environment: {type(error).__name__}: {error}"))
                await websocket.close(CloseCode.INTERNAL_ERROR, "environment factory failed")
                return

            async def close_socket(code: int, reason: str) -> None:
                await websocket.close(code, reason)

            session = Session(pool, env, close_socket)
            await websocket.accept(headers=[(SESSION_ID_HEADER.encode(), session.id.encode())])
            pool.add(session)
            with_text = "text" in websocket.headers.get(FEATURES_HEADER, "").replace(" ", "").split(",")
            await self._serve(websocket, session, with_text)
        finally:
            if session is not None:
                await session.end(CloseCode.NORMAL, "session closed")
            pool.release()

    async def _refuse(self, websocket: WebSocket) -> None:
        pool = self.pool
        if pool.shutting_down:
            message, code, reason = "server is shutting down; connect to another server", CloseCode.SHUTDOWN, "server shutting down"
            refusal = b"shutdown"
        else:
            refusal = b"capacity"
            message = (f"server at capacity: {pool.active}/{pool.max_sessions} sessions open; "
                       "retry later or start the server with a higher --max-concurrent-envs")
            code, reason = CloseCode.CAPACITY, "server at capacity"
        await websocket.accept(headers=[(REFUSED_HEADER.encode(), refusal)])
        await websocket.send_text(error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=pool.active,
                                              max_sessions=pool.max_sessions))
        await websocket.close(code, reason)

    async def _serve(self, websocket: WebSocket, session: Session, with_text: bool) -> None:
        while session.ended is None:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            session.busy = True
            try:
                reply = await self.answer(session, raw, with_text=with_text)
            finally:
                session.busy = False
                session.last_active = time.monotonic()
            if reply is None or session.ended is not None:
                return
            await websocket.send_text(reply)

    async def answer(self, session: Session, raw: str | bytes, *, with_text: bool = False) -> str | None:
        """The reply frame to one client frame, or None when the client asked to close.

        `with_text`: observation frames also carry `"text"` (the client asked for it in the handshake).
        """
        if len(raw) > self.max_message_bytes:
            return error_frame(ErrorCode.MESSAGE_TOO_BIG, f"message of {len(raw)} bytes exceeds the server's limit of "
                               f"{self.max_message_bytes} bytes; send smaller actions")
        try:
            kind, data = decode_frame(raw)
            if kind == "step":
                return observation_frame(self._checked(await session.step(self._action(session, data)), "step"),
                                         with_text=with_text)
            if kind == "call":
                return await self._call(session, data)
            if kind == "reset":
                return observation_frame(self._checked(await session.reset(self._reset_kwargs(data)), "reset"),
                                         with_text=with_text)
            if kind == "state":
                return state_frame(await session.state())
            if kind == "close":
                return None
            raise FrameError(ErrorCode.UNKNOWN_TYPE,
                             f"Unknown message type: {kind}; expected reset, step, state, call or close")
        except FrameError as error:
            return error_frame(error.code, error.message)
        except ValidationError as error:
            return error_frame(ErrorCode.VALIDATION_ERROR, f"Invalid message: {_summarise(error)}",
                               errors=error.errors(include_url=False, include_context=False, include_input=False))
        except Exception as error:
            logger.info("environment raised in session %s: %r", session.id, error)
            return error_frame(ErrorCode.EXECUTION_ERROR, f"{type(error).__name__}: {error}")

    def _action(self, session: Session, data: Any) -> Action:
        if not session.has_reset:
            raise FrameError(ErrorCode.NOT_RESET, 'step before reset: send {"type": "reset"} to start an episode first')
        if not isinstance(data, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             f'Invalid action: "data" must be a JSON object of {self.action_cls.__name__} fields')
        return self.action_cls.model_validate(data)

    def _reset_kwargs(self, data: Any) -> dict[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR, 'Invalid reset: "data" must be a JSON object of keyword arguments')
        if self.reset_names is None:
            return data
        return {key: value for key, value in data.items() if key in self.reset_names}

    async def _call(self, session: Session, data: Any) -> str:
        if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             'Invalid call: expected {"type": "call", "data": {"tool": name, "args": {...}}}')
        spec = self.tools.get(data["tool"])
        if spec is None:
            known = ", ".join(sorted(self.tools)) or "none"
            raise FrameError(ErrorCode.UNKNOWN_TOOL, f"Unknown tool: {data['tool']}; this environment's tools: {known}")
        if not session.has_reset:
            raise FrameError(ErrorCode.NOT_RESET, 'tool call before reset: send {"type": "reset"} first')
        arguments = data.get("args") or {}
        if not isinstance(arguments, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR, f'Invalid call: "args" of {spec.name} must be a JSON object')
        result = await session.call_tool(spec, spec.validate_arguments(arguments))
        return tool_result_frame(spec.name, result)

    @staticmethod
    def _checked(observation: Any, method: str) -> Observation:
        if not isinstance(observation, Observation):
            raise TypeError(f"{method}() returned {type(observation).__name__}, expected an Observation")
        return observation


def _summarise(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
