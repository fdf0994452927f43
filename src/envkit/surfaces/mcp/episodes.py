"""What both `/mcp` dialects do with sessions: open one from the pool, find one (or say why it is gone),
reset it and call its tools, one request at a time per session.

Every session here is a detached session of the one pool (`ServedEnv.open_detached`): it holds a
slot, is refused at capacity, reaped when idle and ended at shutdown exactly as a `/ws` session is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ...core.served_env import ServedEnv, SessionRefused, summarise_validation_error
from ...core.sessions import Session
from ...environment import Observation
from ...protocol import CloseCode, FrameError, observation_payload, tool_result_text
from ...tools import ToolSpec
from .jsonrpc import INVALID_PARAMS, SERVER_ERROR, SESSION_GONE, RpcError

__all__ = ["Episodes", "ToolOutcome", "ToolFailed"]


@dataclass(slots=True)
class ToolOutcome:
    """A tool's result as MCP clients get it: the text a model reads, the value itself, reward and done."""

    text: str
    data: Any
    reward: float | None
    done: bool | None

    @classmethod
    def of(cls, result: Any) -> ToolOutcome:
        if isinstance(result, Observation):
            return cls(result.as_text(), observation_payload(result), result.reward, result.done)
        return cls(tool_result_text(result), result, None, None)


class ToolFailed(Exception):
    """The environment could not run the call (it raised, or the episode needs a reset); the session carries on."""


class Episodes:
    """Sessions of the pool as `/mcp` uses them."""

    def __init__(self, served: ServedEnv) -> None:
        self.served = served
        self.pool = served.pool
        self.tools: dict[str, ToolSpec] = served.tools

    async def open(self) -> Session:
        """A new session holding a slot; raises `RpcError` (SERVER_ERROR) saying why none could be opened."""
        try:
            return await self.served.open_detached()
        except SessionRefused as refused:
            refusal = refused.refusal
            raise RpcError(SERVER_ERROR, refusal.message, {"reason": refusal.kind, "active_sessions": self.pool.active,
                                                   "max_sessions": self.pool.max_sessions}) from None

    def find(self, session_id: Any, *, name: str = "session_id") -> Session:
        """The open session `session_id`; raises `RpcError` saying it is gone (and why) or was never opened."""
        if not isinstance(session_id, str) or not session_id:
            raise RpcError(INVALID_PARAMS, f"Invalid params: {name!r} must be the string id a session was opened with")
        session = self.pool.get(session_id)
        if session is not None and session.owns_slot:
            return session
        ended = self.pool.ended(session_id)
        if ended is not None:
            code, reason = ended
            raise RpcError(SESSION_GONE, f"session {session_id} is gone: {reason}; open a new one",
                           {"session_id": session_id, "close_code": code, "reason": reason})
        raise RpcError(INVALID_PARAMS, f"Unknown {name}: {session_id}; no /mcp session or episode of that id was "
                                       "opened on this server")

    async def close(self, session: Session, reason: str) -> None:
        await session.end(CloseCode.NORMAL, reason)

    async def reset(self, session: Session, kwargs: dict[str, Any]) -> Observation:
        """Start a new episode on `session`; raises `ToolFailed` when the environment raises."""
        async with session.in_use():
            self._check_open(session)
            try:
                kwargs = self.served.reset_kwargs(kwargs)
            except FrameError as error:
                raise ToolFailed(error.message) from None
            try:
                observation = await session.reset(kwargs)
            except Exception as error:
                session.pool.metrics.environment_raised(session.id, error)
                raise ToolFailed(f"reset failed: {type(error).__name__}: {error}") from error
        if not isinstance(observation, Observation):
            raise ToolFailed(f"reset() returned {type(observation).__name__}, expected an Observation")
        return observation

    def tool(self, name: Any) -> ToolSpec:
        """The tool `name`; raises `RpcError` (INVALID_PARAMS) naming the tools there are."""
        spec = self.tools.get(name) if isinstance(name, str) else None
        if spec is None:
            known = ", ".join(sorted(self.tools)) or "none"
            raise RpcError(INVALID_PARAMS, f"Unknown tool: {name}; this environment's tools: {known}")
        return spec

    @staticmethod
    def arguments(spec: ToolSpec, arguments: Any) -> dict[str, Any]:
        """Checked arguments for `spec`; raises `RpcError` (INVALID_PARAMS) saying what is wrong."""
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, f'Invalid params: "arguments" of {spec.name} must be an object')
        try:
            return spec.validate_arguments(arguments)
        except ValidationError as error:
            raise RpcError(INVALID_PARAMS, f"Invalid arguments for {spec.name}: {summarise_validation_error(error)}",
                           {"errors": error.errors(include_url=False, include_context=False,
                                                   include_input=False)}) from None

    async def call(self, session: Session, spec: ToolSpec, arguments: dict[str, Any]) -> ToolOutcome:
        """Run one tool call on `session`; raises `ToolFailed` when the environment cannot run it."""
        async with session.in_use():
            self._check_open(session)
            if not session.may_step:
                raise ToolFailed(f"tool call before reset: reset the episode first ({spec.name} needs a started game)")
            try:
                result = await session.call_tool(spec, arguments)
            except Exception as error:
                session.pool.metrics.environment_raised(session.id, error)
                raise ToolFailed(f"{type(error).__name__}: {error}") from error
        return ToolOutcome.of(result)

    def _check_open(self, session: Session) -> None:
        """A session that ended while this request waited for its turn is gone, not silently reused."""
        if session.ended is not None:
            self.find(session.id)

