"""The WebSocket endpoint: one session per connection, frames answered in order.

`SessionHandler` holds what every transport shares (refusals, building environments, answering
frames); its `__call__` is the Starlette/uvicorn connection lifecycle, and `picows_server`
drives the same parts from picows callbacks.

Every bad frame is answered with an error frame and the session carries on; only capacity,
a failing environment factory, idle reaping and shutdown end a session from the server side,
each with a close code that says why.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any, Callable, NamedTuple

from pydantic import ValidationError
from starlette.websockets import WebSocket

from .access import AccessPolicy
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

__all__ = ["SessionHandler", "Refusal", "wants_text"]


class Refusal(NamedTuple):
    """A connection accepted only to be refused: handshake header value, the one error frame, then the close."""

    kind: str
    frame: str
    code: int
    reason: str


def wants_text(features: str) -> bool:
    """Whether the client's `x-envkit-features` handshake header asks for `"text"` in observation frames."""
    return "text" in features.replace(" ", "").split(",")


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
                 tools: dict[str, ToolSpec], pool: SessionPool, max_message_bytes: int,
                 access: AccessPolicy | None = None) -> None:
        self.factory = factory
        #: Finds the client address that per-client limits count by.
        self.access = access or AccessPolicy()
        self.action_cls = action_cls
        self.tools = tools
        self.pool = pool
        self.max_message_bytes = max_message_bytes
        self.reset_names = reset_parameters(env_class)
        self._ignored_reset_names: set[frozenset[str]] = set()   # each set of dropped names is logged once
        self.inline_factory = env_class.RUN_INLINE

    async def __call__(self, websocket: WebSocket) -> None:
        """Serve one Starlette/uvicorn connection, from handshake to close."""
        pool = self.pool
        client: str | None = None
        if pool.max_sessions_per_client is not None:
            peer = websocket.scope.get("client")
            client = self.access.client_address(peer[0] if peer else None, websocket.headers)
            if not pool.hold_client(client):
                await _refuse(websocket, self.client_refusal(client))
                return
        try:
            await self._serve(websocket)
        finally:
            if client is not None:
                pool.drop_client(client)

    async def _serve(self, websocket: WebSocket) -> None:
        pool = self.pool
        if not pool.try_reserve() and not await pool.wait_for_slot():
            await _refuse(websocket, self.refusal())
            return
        session: Session | None = None
        try:
            try:
                env = self.build() if self.inline_factory else await pool.run_in_worker(self.build)
            except Exception as error:
                await _refuse(websocket, self.factory_refusal(error))
                return

            async def close_socket(code: int, reason: str) -> None:
                await websocket.close(code, reason)

            session = Session(pool, env, close_socket)
            await websocket.accept(headers=[(SESSION_ID_HEADER.encode(), session.id.encode())])
            pool.add(session)
            with_text = wants_text(websocket.headers.get(FEATURES_HEADER, ""))
            while session.ended is None:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                raw = message.get("text")
                reply = await self.handle(session, raw if raw is not None else message.get("bytes") or b"",
                                          with_text=with_text)
                if reply is None or session.ended is not None:
                    return
                await websocket.send_text(reply)
        finally:
            try:
                if session is not None:
                    await session.end(CloseCode.NORMAL, "session closed")
            finally:
                pool.release()

    # -- transport-neutral parts, shared by every transport ----------------------------------

    def build(self) -> Environment:
        """A fresh environment for a new session (call on a worker unless `inline_factory`)."""
        return self.factory()

    def refusal(self) -> Refusal:
        """Why a connection that found no free slot is refused: shutdown or capacity."""
        pool = self.pool
        if pool.shutting_down:
            return Refusal("shutdown", error_frame(ErrorCode.CAPACITY_REACHED,
                                                   "server is shutting down; connect to another server",
                                                   active_sessions=pool.active, max_sessions=pool.max_sessions),
                           CloseCode.SHUTDOWN, "server shutting down")
        message = (f"server at capacity: {pool.active}/{pool.max_sessions} sessions open; "
                   "retry later or start the server with a higher --max-concurrent-envs")
        return Refusal("capacity", error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=pool.active,
                                               max_sessions=pool.max_sessions), CloseCode.CAPACITY, "server at capacity")

    def client_refusal(self, client: str) -> Refusal:
        """The refusal of a connection from a client that already holds its share of sessions."""
        pool = self.pool
        limit = pool.max_sessions_per_client
        message = (f"per-client limit reached: {client} already holds {pool.sessions_of(client)} of the {limit} "
                   f"sessions one client address may open (--max-sessions-per-client {limit}); close one first")
        return Refusal("client_limit", error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=pool.active,
                                                   max_sessions=pool.max_sessions, max_sessions_per_client=limit),
                       CloseCode.CAPACITY, "per-client session limit reached")

    @staticmethod
    def factory_refusal(error: Exception) -> Refusal:
        """The refusal of a connection whose environment could not be built (logs the traceback)."""
        logger.error("environment factory failed", exc_info=error)
        return Refusal("factory", error_frame(ErrorCode.FACTORY_ERROR,
                                              f"could not create the environment: {type(error).__name__}: {error}"),
                       CloseCode.INTERNAL_ERROR, "environment factory failed")

    async def handle(self, session: Session, raw: str | bytes, *, with_text: bool) -> str | None:
        """`answer`, with the bookkeeping the idle reaper reads (busy while answering, last activity)."""
        session.busy = True
        try:
            return await self.answer(session, raw, with_text=with_text)
        finally:
            session.busy = False
            session.last_active = time.monotonic()

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
        ignored = frozenset(data) - self.reset_names
        if ignored and ignored not in self._ignored_reset_names:
            self._ignored_reset_names.add(ignored)
            logger.warning("reset ignores %s: the environment's reset() takes only %s (as OpenEnv servers do, "
                           "unknown reset arguments are dropped)", ", ".join(sorted(ignored)),
                           ", ".join(sorted(self.reset_names)) or "no arguments")
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


async def _refuse(websocket: WebSocket, refusal: Refusal) -> None:
    await websocket.accept(headers=[(REFUSED_HEADER.encode(), refusal.kind.encode())])
    await websocket.send_text(refusal.frame)
    await websocket.close(refusal.code, refusal.reason)


def _summarise(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
