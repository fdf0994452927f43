"""The WebSocket endpoint: one session per connection, frames answered in order.

`SessionHandler` holds the session's parts (refusals, building environments, answering frames);
its `__call__` is the Starlette/uvicorn connection lifecycle, and the HTTP surfaces open detached
sessions through it.

Every bad frame is answered with an error frame and the session carries on; only capacity,
a failing environment factory, idle reaping and shutdown end a session from the server side,
each with a close code that says why.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from pydantic import ValidationError
from starlette.types import Receive, Send
from starlette.websockets import WebSocket, WebSocketDisconnect

from ..core.access import AccessPolicy
from ..core.reset_arguments import ResetArguments
from ..core.sessions import Session, SessionPool, current_client
from ..environment import Action, Environment, Observation
from ..model_codec import validator_for
from ..protocol import (
    FEATURES_HEADER,
    REFUSED_HEADER,
    Features,
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
from ..tools import ToolSpec

if TYPE_CHECKING:
    from ..core.inline_answers import InlineAnswers

logger = logging.getLogger("envkit.server")

#: `/ws?session_id=ID` attaches the socket to a session opened over HTTP (`/mcp`'s `openenv/session/create`),
#: as OpenEnv's MCP client does, so reset/step on the socket and tool calls over HTTP play one game.
ATTACH_PARAMETER = "session_id"

__all__ = ["SessionHandler", "Refusal", "SessionRefused", "summarise_validation_error", "ATTACH_PARAMETER",
           "INLINE_FRAMES"]

#: ASGI scope extension a transport may offer: `answer_inline(handler, session, features) -> InlineAnswers` makes
#: it answer the session's frames in its own callbacks (`uvicorn_protocols`); taken for `RUN_INLINE` environments.
INLINE_FRAMES = "envkit.inline_frames"


class Refusal(NamedTuple):
    """A connection accepted only to be refused: handshake header value, the one error frame, then the close.

    `message` is the error frame's message, for surfaces that answer without frames (`/mcp`).
    """

    kind: str
    frame: str
    code: int
    reason: str
    message: str


class SessionRefused(Exception):
    """No session could be opened (capacity, shutdown, a failing factory); `refusal` says why."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


class SessionHandler:
    """Serves `/ws`: builds an environment per connection and answers its frames."""

    def __init__(self, factory: Callable[[], Environment], env_class: type[Environment], action_cls: type[Action],
                 tools: dict[str, ToolSpec], pool: SessionPool, max_message_bytes: int,
                 access: AccessPolicy | None = None) -> None:
        self.factory = factory
        #: Finds the client address that per-client limits count by.
        self.access = access or AccessPolicy()
        self.action_cls = action_cls
        self._validate_action = validator_for(action_cls)
        self.tools = tools
        self.pool = pool
        self.max_message_bytes = max_message_bytes
        self.reset_arguments = ResetArguments(env_class)
        self.inline_factory = env_class.RUN_INLINE
        self.has_metrics = bool(env_class.METRICS)

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
            client = self.access.client_address(peer[0] if peer else None, websocket.headers)
            if not pool.hold_client(client):
                await _refuse(websocket, self.client_refusal(client))
                return
        try:
            await self._serve(websocket, receive, send, direct)
        finally:
            if client is not None:
                pool.drop_client(client)

    async def _serve(self, websocket: WebSocket, receive: Receive, send: Send, direct: bool) -> None:
        pool = self.pool
        if not pool.try_reserve() and not await pool.wait_for_slot():
            await _refuse(websocket, self.refusal())
            return
        session: Session | None = None
        inline: InlineAnswers | None = None
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
            features = Features.parse(websocket.headers.get(FEATURES_HEADER, ""),
                                      websocket.scope.get("query_string", b""))
            extensions = websocket.scope.get("extensions") or {}
            answer_inline = extensions.get(INLINE_FRAMES) if direct and self.inline_factory else None
            if answer_inline is not None:   # the transport answers frames in its own callbacks from now on
                inline = answer_inline(self, session, features)
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

    # -- parts shared with the HTTP surfaces -----------------------------------------------------

    async def open_detached(self, session_id: str | None = None) -> Session:
        """Open a session that no connection holds (HTTP surfaces): a slot, a fresh environment, registered.

        The session gives its slot back when it ends (explicitly, by the idle reaper or at shutdown).
        `session_id`: an id the surface's client chose (default: a fresh one); the caller makes sure no
        open session has it.

        The session counts against the per-client limit of the request's client (`current_client`).

        Raises:
            SessionRefused: at capacity, over the client's share, during shutdown, or when the environment could
                not be built.
        """
        pool = self.pool
        client = current_client.get() if pool.max_sessions_per_client is not None else None
        if client is not None and not pool.hold_client(client):
            raise SessionRefused(self.client_refusal(client))
        try:
            if not pool.try_reserve() and not await pool.wait_for_slot():
                raise SessionRefused(self.refusal())
            try:
                env = self.build() if self.inline_factory else await pool.run_in_worker(self.build)
            except BaseException as error:
                pool.release()
                if isinstance(error, Exception):
                    raise SessionRefused(self.factory_refusal(error)) from error
                raise
        except BaseException:
            if client is not None:
                pool.drop_client(client)
            raise
        session = Session(pool, env, None, session_id=session_id, owns_slot=True, client=client)
        pool.add(session)
        return session

    def build(self) -> Environment:
        """A fresh environment for a new session (call on a worker unless `inline_factory`)."""
        return self.factory()

    def refusal(self) -> Refusal:
        """Why a connection that found no free slot is refused: shutdown or capacity."""
        pool = self.pool
        if pool.shutting_down:
            pool.metrics.refused("shutdown")
            message = "server is shutting down; connect to another server"
            return Refusal("shutdown", error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=pool.active,
                                                   max_sessions=pool.max_sessions),
                           CloseCode.SHUTDOWN, "server shutting down", message)
        active = pool.active_everywhere
        message = (f"server at capacity: {active}/{pool.max_sessions} sessions open; "
                   "retry later or start the server with a higher --max-concurrent-envs")
        pool.metrics.refused("capacity", message)
        return Refusal("capacity", error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=active,
                                               max_sessions=pool.max_sessions),
                       CloseCode.CAPACITY, "server at capacity", message)

    def client_refusal(self, client: str) -> Refusal:
        """The refusal of a connection from a client that already holds its share of sessions."""
        pool = self.pool
        limit = pool.max_sessions_per_client
        message = (f"per-client limit reached: {client} already holds {pool.sessions_of(client)} of the {limit} "
                   f"sessions one client address may open (--max-sessions-per-client {limit}); close one first")
        pool.metrics.refused("client_limit", message)
        return Refusal("client_limit", error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=pool.active,
                                                   max_sessions=pool.max_sessions, max_sessions_per_client=limit),
                       CloseCode.CAPACITY, "per-client session limit reached", message)

    def factory_refusal(self, error: Exception) -> Refusal:
        """The refusal of a connection whose environment could not be built (logs the traceback)."""
        logger.error("environment factory failed", exc_info=error)
        self.pool.metrics.refused("factory", log=False)
        message = f"could not create the environment: {type(error).__name__}: {error}"
        return Refusal("factory", error_frame(ErrorCode.FACTORY_ERROR, message), CloseCode.INTERNAL_ERROR,
                       "environment factory failed", message)

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
            if size > self.max_message_bytes:
                raise FrameError(ErrorCode.MESSAGE_TOO_BIG, f"message of {size} bytes exceeds the server's limit of "
                                 f"{self.max_message_bytes} bytes; send smaller actions")
            kind, data = decode_frame(raw)
            if kind == "step":
                observation = self._checked(await session.step(self._action(session, data)), "step")
                return observation_frame(observation, with_text=features.text,
                                         metrics=self._metrics(session, features) if features.metrics else None)
            if kind == "call":
                return await self._call(session, data, features)
            if kind == "reset":
                observation = self._checked(await session.reset(self.reset_kwargs(data)), "reset")
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

    def _action(self, session: Session, data: Any) -> Action:
        if not session.may_step:
            raise FrameError(ErrorCode.NOT_RESET, 'step before reset: send {"type": "reset"} to start an episode first')
        if not isinstance(data, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             f'Invalid action: "data" must be a JSON object of {self.action_cls.__name__} fields')
        return self._validate_action(data)

    def reset_kwargs(self, data: Any) -> dict[str, Any]:
        """A reset request's keyword arguments, checked (`envkit.core.reset_arguments`); raises `FrameError`."""
        return self.reset_arguments.check(data)

    def _metrics(self, session: Session, features: Features) -> dict[str, Any] | None:
        """The episode metrics for a client that asked for them, from an environment that declares some."""
        if not (features.metrics and self.has_metrics):
            return None
        return dict(session.env.episode_metrics())

    async def _call(self, session: Session, data: Any, features: Features) -> str:
        if not isinstance(data, dict) or not isinstance(data.get("tool"), str):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             'Invalid call: expected {"type": "call", "data": {"tool": name, "args": {...}}}')
        spec = self.tools.get(data["tool"])
        if spec is None:
            known = ", ".join(sorted(self.tools)) or "none"
            raise FrameError(ErrorCode.UNKNOWN_TOOL, f"Unknown tool: {data['tool']}; this environment's tools: {known}")
        if not session.may_step:
            raise FrameError(ErrorCode.NOT_RESET, 'tool call before reset: send {"type": "reset"} first')
        arguments = data.get("args") or {}
        if not isinstance(arguments, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR, f'Invalid call: "args" of {spec.name} must be a JSON object')
        result = await session.call_tool(spec, spec.validate_arguments(arguments))
        return tool_result_frame(spec.name, result, metrics=self._metrics(session, features))

    @staticmethod
    def _checked(observation: Any, method: str) -> Observation:
        if not isinstance(observation, Observation):
            raise TypeError(f"{method}() returned {type(observation).__name__}, expected an Observation")
        return observation


async def _refuse(websocket: WebSocket, refusal: Refusal) -> None:
    await websocket.accept(headers=[(REFUSED_HEADER.encode(), refusal.kind.encode())])
    await websocket.send_text(refusal.frame)
    await websocket.close(refusal.code, refusal.reason)


def summarise_validation_error(error: ValidationError) -> str:
    """A validation error in one line: `where: what` for each problem."""
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)
