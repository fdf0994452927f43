"""The served environment as every surface needs it: its factory and tools, actions and reset arguments checked,
sessions opened from the one pool, and the refusals when none can be.

`ServedEnv` is what a surface is given (`/ws`, `/mcp`, ORS, `/web` and any new one); a surface never imports
another surface.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Coroutine, NamedTuple, Protocol

from pydantic import ValidationError

from ..environment import Action, Environment
from ..model_codec import validator_for
from ..protocol import CloseCode, ErrorCode, Features, FrameError, error_frame
from ..tools import ToolSpec, tool_specs
from .access import AccessPolicy
from .reset_arguments import ResetArguments
from .sessions import Session, SessionPool, current_client

__all__ = ["ServedEnv", "Refusal", "SessionRefused", "summarise_validation_error", "INLINE_FRAMES",
           "FrameAnswerer", "InlineFrames"]

logger = logging.getLogger("envkit.server")

#: ASGI scope extension a transport may offer (its fast path `inline`): `answer_inline(answer, session, features)`
#: returns `InlineFrames`, and from then on the transport answers the session's frames in its own callbacks with
#: `answer`. The /ws surface takes it for `RUN_INLINE` environments; without it, frames come through the ASGI queue.
INLINE_FRAMES = "envkit.inline_frames"


class FrameAnswerer(Protocol):
    """What answers one frame of a session (the /ws surface's `SessionHandler.handle`): its reply, or None to close."""

    def __call__(self, session: Session, raw: str | bytes, *,
                 features: Features) -> Coroutine[Any, Any, str | None]: ...


class InlineFrames(Protocol):
    """A session's frames as a transport answers them (`INLINE_FRAMES`)."""

    #: The task answering a frame that had to wait, while there is one.
    answering: asyncio.Task[None] | None

    def on_message(self, raw: str | bytes) -> None:
        """Answer one message that reached the app before the transport took over, after those before it."""


class Refusal(NamedTuple):
    """A session that could not be opened: handshake header value, the one error frame, then the close.

    `message` is the error frame's message, for surfaces that answer without frames (`/mcp`, ORS).
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


def summarise_validation_error(error: ValidationError) -> str:
    """A validation error in one line: `where: what` for each problem."""
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


class ServedEnv:
    """One environment class served over one pool: what each surface opens its sessions through."""

    def __init__(self, factory: Callable[[], Environment], env_class: type[Environment], action_cls: type[Action],
                 tools: dict[str, ToolSpec], pool: SessionPool, max_message_bytes: int,
                 access: AccessPolicy | None = None) -> None:
        self.factory = factory
        self.env_class = env_class
        #: Finds the client address that per-client limits count by.
        self.access = access or AccessPolicy()
        self.action_cls = action_cls
        self.validate_action: Callable[[Any], Action] = validator_for(action_cls)
        self.tools = tools
        #: The environment's service tools (`@tool(service=True)`): reached by `call_tool` steps, without a reset.
        self.service_tools = tool_specs(env_class, service=True)
        self.pool = pool
        self.max_message_bytes = max_message_bytes
        #: What a reset request may carry (`envkit.core.reset_arguments`).
        self.reset_arguments = ResetArguments(env_class)
        self.inline_factory = env_class.RUN_INLINE
        self.has_metrics = bool(env_class.METRICS)

    def build(self) -> Environment:
        """A fresh environment for a new session (call on a worker unless `inline_factory`)."""
        return self.factory()

    async def build_for_session(self) -> Environment:
        """`build`, on a worker thread unless the class runs inline."""
        return self.build() if self.inline_factory else await self.pool.run_in_worker(self.build)

    async def open_detached(self, session_id: str | None = None) -> Session:
        """Open a session that no connection holds (HTTP surfaces): a slot, a fresh environment, registered.

        The session gives its slot back when it ends (explicitly, by the idle reaper or at shutdown).
        `session_id`: an id the surface's client chose (default: a fresh one); the caller makes sure no
        open session has it. The session counts against the per-client limit of the request's client
        (`current_client`).

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
                env = await self.build_for_session()
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

    # -- refusals ---------------------------------------------------------------------------------

    def refusal(self) -> Refusal:
        """Why a session that found no free slot is refused: shutdown or capacity."""
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
        """The refusal of a session for a client that already holds its share of sessions."""
        pool = self.pool
        limit = pool.max_sessions_per_client
        message = (f"per-client limit reached: {client} already holds {pool.sessions_of(client)} of the {limit} "
                   f"sessions one client address may open (--max-sessions-per-client {limit}); close one first")
        pool.metrics.refused("client_limit", message)
        return Refusal("client_limit", error_frame(ErrorCode.CAPACITY_REACHED, message, active_sessions=pool.active,
                                                   max_sessions=pool.max_sessions, max_sessions_per_client=limit),
                       CloseCode.CAPACITY, "per-client session limit reached", message)

    def factory_refusal(self, error: Exception) -> Refusal:
        """The refusal of a session whose environment could not be built (logs the traceback)."""
        logger.error("environment factory failed", exc_info=error)
        self.pool.metrics.refused("factory", log=False)
        message = f"could not create the environment: {type(error).__name__}: {error}"
        return Refusal("factory", error_frame(ErrorCode.FACTORY_ERROR, message), CloseCode.INTERNAL_ERROR,
                       "environment factory failed", message)

    # -- what a request carries -------------------------------------------------------------------

    def action(self, session: Session, data: Any) -> Action:
        """`data` as the environment's action for a step of `session`; raises `FrameError` (not reset, not a JSON
        object) or pydantic's `ValidationError`."""
        if not session.may_step:
            raise FrameError(ErrorCode.NOT_RESET, 'step before reset: send {"type": "reset"} to start an episode first')
        if not isinstance(data, dict):
            raise FrameError(ErrorCode.VALIDATION_ERROR,
                             f'Invalid action: "data" must be a JSON object of {self.action_cls.__name__} fields')
        return self.validate_action(data)

    def is_tool_call(self, data: Any) -> bool:
        """Whether a step's `data` is OpenEnv's `CallToolAction` (`{"type": "call_tool", "tool_name", "arguments"}`):
        always, unless the environment's own action has a `type` field, whose steps stay its own."""
        return isinstance(data, dict) and data.get("type") == "call_tool" and "type" not in self.action_cls.model_fields

    def reset_kwargs(self, data: Any) -> dict[str, Any]:
        """A reset request's keyword arguments, checked (`envkit.core.reset_arguments`); raises `FrameError`."""
        return self.reset_arguments.check(data)
