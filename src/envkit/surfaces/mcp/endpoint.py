"""`/mcp` over HTTP (MCP's streamable HTTP transport): one JSON-RPC message per POST.

- The reply is JSON, or one server-sent event when the client's `Accept` asks for `text/event-stream`
  and not for JSON. Notifications and responses are acknowledged with 202 and no body. A JSON-RPC
  error is still HTTP 200 (OpenEnv's validator POSTs `{}` and wants 200 with `"jsonrpc": "2.0"`),
  except for an unknown `Mcp-Session-Id` (404, as MCP asks) and a body over the message limit (413).
- `initialize` hands out an `Mcp-Session-Id`; the episodes `reset` opens under it end when the
  client DELETEs it. Clients without one (stateless, OpenEnv's) are served all the same.
- GET is 405: the server never sends requests or notifications of its own.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Coroutine

from ...core.served_env import ServedEnv
from ...core.sessions import Session, new_session_id
from ...protocol import CloseCode, to_json
from ...core.http_exchange import EVENT_STREAM, JSON, BodyTooLarge, ClientGone, Exchange, ExchangeEndpoint
from .episodes import Episodes
from .jsonrpc import (INTERNAL_ERROR, INVALID_REQUEST, Message, RpcError, error_response, parse_message,
                      result_response)
from .openenv_dialect import OpenEnvDialect
from .standard import StandardDialect

__all__ = ["McpEndpoint", "SESSION_HEADER"]

logger = logging.getLogger("envkit.server")

SESSION_HEADER = "mcp-session-id"
_SESSION_HEADER = SESSION_HEADER.encode()
_PROTOCOL_HEADER = b"mcp-protocol-version"


class McpEndpoint(ExchangeEndpoint):
    """Serves `/mcp` for one app: OpenEnv's dialect and standard MCP, on the app's session pool."""

    #: MCP sessions remembered at once (each is a set of episode ids); the least recently used is forgotten.
    MAX_MCP_SESSIONS = 10_000

    def __init__(self, served: ServedEnv, name: str, description: str) -> None:
        self.episodes = Episodes(served)
        self.openenv = OpenEnvDialect(self.episodes)
        self.standard = StandardDialect(self.episodes, served.env_class, name, description)
        self.max_body_bytes = served.max_message_bytes
        self._mcp_sessions: OrderedDict[str, set[str]] = OrderedDict()

    def answer(self, exchange: Exchange) -> Coroutine[Any, Any, None]:
        """GET, POST and DELETE `/mcp` (the app's access layer has checked the key and the page's Origin already).

        A plain method that returns the coroutine answering the request: one coroutine less per call."""
        if exchange.method == "POST":
            return self._post(exchange)
        if exchange.method == "DELETE":
            return self._delete(exchange)
        return exchange.respond_text(405, "this server sends nothing unasked: POST JSON-RPC requests to /mcp",
                                     [("allow", "POST, DELETE")])

    async def _post(self, exchange: Exchange) -> None:
        try:
            body = await exchange.body(self.max_body_bytes)
        except BodyTooLarge as too_large:
            error = RpcError(INVALID_REQUEST, f"request of {too_large.size} bytes exceeds the server's limit of "
                                              f"{too_large.limit} bytes")
            return await _reply(exchange, error_response(None, error), status=413)
        except ClientGone:
            return
        try:
            message = parse_message(body)
        except RpcError as error:
            return await _reply(exchange, error_response(error.request_id, error))
        if not message.is_request:
            return await exchange.respond(202)
        mcp_session_id = exchange.header(_SESSION_HEADER)
        owned: set[str] | None = None
        if mcp_session_id is not None and message.method != "initialize":
            owned = self._mcp_sessions.get(mcp_session_id)
            if owned is None:
                error = RpcError(INVALID_REQUEST, f"unknown or expired MCP session {mcp_session_id}; "
                                                  "initialize a new one")
                return await _reply(exchange, error_response(message.id, error), status=404)
            self._mcp_sessions.move_to_end(mcp_session_id)
        reply = await self._answer(message, owned)
        headers = []
        if message.method == "initialize" and "result" in reply:
            headers.append((SESSION_HEADER, self._new_mcp_session()))
        elif owned is not None:
            headers.append((SESSION_HEADER, mcp_session_id))
        if isinstance(reply.get("result"), dict) and (
                message.method == "server/discover"
                or StandardDialect.is_modern(message, exchange.header(_PROTOCOL_HEADER))):
            StandardDialect.modern_result(message.method, reply["result"])
        await _reply(exchange, reply, headers=headers)

    async def _answer(self, message: Message, owned: set[str] | None) -> dict[str, Any]:
        try:
            if OpenEnvDialect.speaks(message):
                result = await self.openenv.answer(message)
            else:
                track = None if owned is None else lambda session: _track(owned, session, self.episodes.pool)
                result = await self.standard.answer(message, track=track)
        except RpcError as error:
            return error_response(message.id, error)
        except Exception as error:   # a server bug: say so, keep serving
            logger.exception("/mcp %s failed", message.method)
            return error_response(message.id, RpcError(INTERNAL_ERROR, f"Internal error: {type(error).__name__}: "
                                                                       f"{error}"))
        return result_response(message.id, result)

    def _new_mcp_session(self) -> str:
        session_id = new_session_id()
        self._mcp_sessions[session_id] = set()
        while len(self._mcp_sessions) > self.MAX_MCP_SESSIONS:
            self._mcp_sessions.popitem(last=False)   # its episodes stay until closed or reaped
        return session_id

    async def _delete(self, exchange: Exchange) -> None:
        mcp_session_id = exchange.header(_SESSION_HEADER)
        if mcp_session_id is None:
            return await exchange.respond_text(400, f"DELETE /mcp needs the {SESSION_HEADER} header of the session "
                                                    "to end")
        owned = self._mcp_sessions.pop(mcp_session_id, None)
        if owned is None:
            return await exchange.respond_text(404, f"unknown or expired MCP session {mcp_session_id}")
        for episode_id in owned:
            session = self.episodes.pool.get(episode_id)
            if session is not None:
                await session.end(CloseCode.NORMAL, "its MCP session was ended by the client")
        await exchange.respond(204)


def _track(owned: set[str], session: Session, pool: Any) -> None:
    """Remember an episode opened under an MCP session; forget ended ones once there are many."""
    owned.add(session.id)
    if len(owned) > 256:
        owned.intersection_update({episode_id for episode_id in owned if pool.get(episode_id) is not None})


def _reply(exchange: Exchange, payload: dict[str, Any], *, status: int = 200,
           headers: list[tuple[str, str]] | None = None) -> Coroutine[Any, Any, None]:
    """`payload` as JSON, or as one server-sent event when the client accepts only an event stream (await it)."""
    accept = exchange.header(b"accept") or ""
    body = to_json(payload)
    if EVENT_STREAM in accept and JSON not in accept and "*/*" not in accept:
        return exchange.respond(status, b"event: message\ndata: " + body + b"\n\n", EVENT_STREAM, headers or ())
    return exchange.respond(status, body, JSON, headers or ())
