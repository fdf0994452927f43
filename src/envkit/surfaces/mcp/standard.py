"""Standard MCP (the `mcp` SDK 1.x and 2.x, agent harnesses): initialize, ping, tools/list, tools/call,
and `server/discover` for clients of the stateless 2026-07-28 revision.

MCP has no notion of an episode, and a stateless client has no session, so an episode is held by an
explicit handle: the `reset` tool opens one (a session of the pool, holding a slot) and returns its
`episode_id`; every environment tool takes that `episode_id` as an extra argument; `close` ends it.
Two clients therefore never share a game, whatever their transport keeps. A tool result carries the
text a model reads, and `structuredContent` with `episode_id`, `reward`, `done` and `data` (the
tool's own value, or the observation payload for a tool that returns an Observation).

Protocol errors (unknown tool, bad arguments, an episode that is gone) are JSON-RPC errors; what the
environment itself refuses or raises is a result with `isError: true`, which a model reads and can
correct.
"""

from __future__ import annotations

import inspect
import typing
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable

from ...core.sessions import Session
from ...environment import Environment
from ...errors import ToolDefinitionError
from ...tools import ToolSpec, json_schema_for, parse_google_docstring
from .episodes import Episodes, ToolFailed, ToolOutcome
from .jsonrpc import INVALID_PARAMS, METHOD_NOT_FOUND, Message, RpcError

__all__ = ["StandardDialect", "HANDSHAKE_VERSIONS", "MODERN_VERSIONS"]

#: Revisions answered through the `initialize` handshake, oldest first.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: Stateless revisions, found by `server/discover`: no handshake, every request stands alone.
MODERN_VERSIONS = ("2026-07-28",)
#: Methods whose 2026-07-28 results carry caching directives (`ttlMs`, `cacheScope`).
_CACHEABLE = ("server/discover", "tools/list")
_SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"
_PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
EPISODE_ID = "episode_id"
RESET, CLOSE = "reset", "close"   # never an environment tool's name: `tool_specs` refuses both


def _envkit_version() -> str:
    try:
        return version("envkit")
    except PackageNotFoundError:
        return "0"


class StandardDialect:
    """Answers standard MCP requests for one served environment."""

    def __init__(self, episodes: Episodes, env_class: type[Environment], name: str, description: str) -> None:
        self.episodes = episodes
        self.server_info = {"name": name, "version": _envkit_version()}
        self.instructions = (f"{description}\nCall `reset` to start an episode; it returns an episode_id. Pass "
                             "that episode_id to every other tool, and call `close` with it when you are done.").strip()
        self.tool_listing = [_reset_tool(env_class), _close_tool()] + [_with_episode(spec)
                                                                         for spec in episodes.tools.values()]

    async def answer(self, message: Message, *, track: Callable[[Session], None] | None = None) -> Any:
        """The result of one request; raises `RpcError`. `track` learns of each episode `reset` opens."""
        method, params = message.method, message.params
        if method == "tools/call":   # nearly every request
            return await self._call(params, track)
        if method == "initialize":
            return self._initialize(params)
        if method == "server/discover":
            return {"supportedVersions": [*HANDSHAKE_VERSIONS, *MODERN_VERSIONS],
                    "capabilities": {"tools": {"listChanged": False}}, "instructions": self.instructions,
                    "_meta": {_SERVER_INFO_META: self.server_info}}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self.tool_listing}
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method}; this server answers initialize, ping, "
                                         "tools/list, tools/call and server/discover")

    @staticmethod
    def is_modern(message: Message, protocol_header: str | None) -> bool:
        """Whether `message` comes from a client of a stateless revision (by its header or its `_meta`)."""
        meta = message.params.get("_meta")
        stamped = meta.get(_PROTOCOL_VERSION_META) if isinstance(meta, dict) else None
        return protocol_header in MODERN_VERSIONS or stamped in MODERN_VERSIONS

    @staticmethod
    def modern_result(method: str | None, result: dict[str, Any]) -> dict[str, Any]:
        """`result` as the 2026-07-28 revision shapes it: a result type, and caching directives where it asks."""
        result.setdefault("resultType", "complete")
        if method in _CACHEABLE:
            result.setdefault("ttlMs", 0)
            result.setdefault("cacheScope", "private")
        return result

    def _initialize(self, params: dict[str, Any]) -> dict[str, Any]:
        asked = params.get("protocolVersion")
        agreed = asked if asked in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        return {"protocolVersion": agreed, "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": self.server_info, "instructions": self.instructions}

    async def _call(self, params: dict[str, Any], track: Callable[[Session], None] | None) -> dict[str, Any]:
        episodes = self.episodes
        name, arguments = params.get("name"), params.get("arguments") or {}
        if not isinstance(name, str):
            raise RpcError(INVALID_PARAMS, 'Invalid params: tools/call needs "name", the tool to call')
        if not isinstance(arguments, dict):
            raise RpcError(INVALID_PARAMS, f'Invalid params: "arguments" of {name} must be an object')
        arguments = dict(arguments)
        episode_id = arguments.pop(EPISODE_ID, None)
        if name == RESET:
            return await self._reset(episode_id, arguments, track)
        if name == CLOSE:
            session = episodes.find(_required_episode(episode_id, name), name=EPISODE_ID)
            await episodes.close(session, "closed by the close tool")
            return _result(f"episode {session.id} closed", session.id, ToolOutcome("", None, None, True))
        spec = episodes.tool(name)
        session = episodes.find(_required_episode(episode_id, name), name=EPISODE_ID)
        checked = episodes.arguments(spec, arguments)
        try:
            outcome = await episodes.call(session, spec, checked)
        except ToolFailed as failed:
            return _failure(str(failed), session.id)
        return _result(outcome.text, session.id, outcome)

    async def _reset(self, episode_id: Any, arguments: dict[str, Any],
                     track: Callable[[Session], None] | None) -> dict[str, Any]:
        episodes = self.episodes
        fresh = episode_id is None
        session = await episodes.open() if fresh else episodes.find(episode_id, name=EPISODE_ID)
        if fresh and track is not None:
            track(session)
        try:
            names = episodes.served.reset_arguments.names
            handle = {EPISODE_ID: session.id} if names is None or EPISODE_ID in names else {}
            observation = await episodes.reset(session, {**arguments, **handle})   # the env's episode id is the handle
        except ToolFailed as failed:
            if fresh:
                await episodes.close(session, "reset failed")
            return _failure(str(failed), None if fresh else session.id)
        outcome = ToolOutcome.of(observation)
        return _result(f"episode_id: {session.id}\n\n{outcome.text}", session.id, outcome)


def _required_episode(episode_id: Any, tool: str) -> str:
    if episode_id is None:
        raise RpcError(INVALID_PARAMS, f"Invalid params: {tool} needs episode_id; call reset first and pass the "
                                       "episode_id it returns")
    return episode_id


def _result(text: str, episode_id: str, outcome: ToolOutcome) -> dict[str, Any]:
    structured = {EPISODE_ID: episode_id, "reward": outcome.reward, "done": outcome.done, "data": outcome.data}
    return {"content": [{"type": "text", "text": text}], "structuredContent": structured, "isError": False}


def _failure(text: str, episode_id: str | None) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "structuredContent": {EPISODE_ID: episode_id},
            "isError": True}


_EPISODE_ARGUMENT = {"type": "string", "description": "The episode to act in: the episode_id that reset returned."}


def _with_episode(spec: ToolSpec) -> dict[str, Any]:
    parameters = spec.parameters
    schema = {"type": "object", "properties": {EPISODE_ID: _EPISODE_ARGUMENT, **parameters["properties"]},
              "required": [EPISODE_ID, *parameters.get("required", [])]}
    return {"name": spec.name, "description": spec.description, "inputSchema": schema}


def _close_tool() -> dict[str, Any]:
    return {"name": CLOSE, "description": "End an episode and free its place on the server.",
            "inputSchema": {"type": "object", "properties": {EPISODE_ID: _EPISODE_ARGUMENT}, "required": [EPISODE_ID]}}


def _reset_tool(env_class: type[Environment]) -> dict[str, Any]:
    """`reset`'s listing: the environment's reset arguments, typed from its signature, plus `episode_id`."""
    method = env_class.reset_async if env_class.reset_async is not Environment.reset_async else env_class.reset
    described = parse_google_docstring(method.__doc__).args
    try:
        hints = typing.get_type_hints(method)
    except Exception:
        hints = {}
    properties: dict[str, Any] = {EPISODE_ID: {
        "type": "string", "description": "Leave out to start a new episode; give an episode_id to start that episode "
                                         "over."}}
    open_ended = False
    for param in list(inspect.signature(method).parameters.values())[1:]:
        if param.kind is param.VAR_KEYWORD:
            open_ended = True
            continue
        if param.kind is param.VAR_POSITIONAL or param.name == EPISODE_ID:
            continue
        try:
            schema = json_schema_for(hints[param.name], param.name) if param.name in hints else {}
        except ToolDefinitionError:
            schema = {}
        if param.name in described:
            schema["description"] = described[param.name]
        elif param.name == "seed":
            schema["description"] = "Seed for a reproducible episode."
        properties[param.name] = schema
    schema = {"type": "object", "properties": properties}
    if open_ended:
        schema["additionalProperties"] = True
    return {"name": RESET, "description": "Start an episode; returns its episode_id and the first observation.",
            "inputSchema": schema}
