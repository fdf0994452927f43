"""OpenEnv 0.10.0's `/mcp` dialect, as its `MCPToolClient` (production mode) speaks it.

    openenv/session/create  {}                                  → {"session_id": id}
    tools/list              {"session_id": id}                  → {"tools": [{name, description, inputSchema}]}
    tools/call              {"session_id": id, "name", "arguments"}
                            → {"content": [{"type": "text", "text"}], "data": value, "reward", "done", "isError"}
    openenv/session/close   {"session_id": id}                  → {"session_id": id, "closed": true}

`MCPToolClient.call_tool` returns `result["data"]`: the tool's own value (a string, a dict), or for a
tool that returns an Observation the observation payload `/ws` sends (`observation`, `reward`, `done`).
The client also attaches a WebSocket to the session (`/ws?session_id=id`) for reset and step, so both
play one game; see `SessionHandler` for what happens when that socket closes.
"""

from __future__ import annotations

from typing import Any

from .episodes import Episodes, ToolFailed
from .jsonrpc import INTERNAL_ERROR, METHOD_NOT_FOUND, Message, RpcError

__all__ = ["OpenEnvDialect", "SESSION_METHODS"]

SESSION_METHODS = ("openenv/session/create", "openenv/session/close")


class OpenEnvDialect:
    """Answers OpenEnv's session methods and the tool methods that name a `session_id`."""

    def __init__(self, episodes: Episodes) -> None:
        self.episodes = episodes

    @staticmethod
    def speaks(message: Message) -> bool:
        """Whether `message` is OpenEnv's: a session method, or a request that names a `session_id`."""
        return message.method in SESSION_METHODS or "session_id" in message.params

    async def answer(self, message: Message) -> Any:
        """The result of one OpenEnv request; raises `RpcError`."""
        episodes, params = self.episodes, message.params
        if message.method == "openenv/session/create":
            session = await episodes.open()
            return {"session_id": session.id}
        if message.method == "openenv/session/close":
            session = episodes.find(params.get("session_id"))
            await episodes.close(session, "closed by openenv/session/close")
            return {"session_id": session.id, "closed": True}
        if message.method == "tools/list":
            episodes.find(params.get("session_id"))
            return {"tools": [_listing(spec) for spec in episodes.tools.values()]}
        if message.method == "tools/call":
            session = episodes.find(params.get("session_id"))
            spec = episodes.tool(params.get("name"))
            arguments = episodes.arguments(spec, params.get("arguments") or {})
            try:
                outcome = await episodes.call(session, spec, arguments)
            except ToolFailed as failed:
                raise RpcError(INTERNAL_ERROR, f"Tool '{spec.name}' failed: {failed}") from None
            return {"content": [{"type": "text", "text": outcome.text}], "data": outcome.data,
                    "reward": outcome.reward, "done": outcome.done, "isError": False}
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {message.method}; with a session_id this endpoint "
                                         "answers tools/list, tools/call and openenv/session/close")


def _listing(spec: Any) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "inputSchema": spec.parameters}
