"""Moving a `SessionScript` over the HTTP surfaces: MCP `tools/call` at `/mcp`, and the Open Reward Standard's `/call`.

Each session keeps one HTTP/1.1 connection alive (`HttpConnection`, a minimal client on asyncio
streams, so that the load generator stays cheap beside the server) and plays the same script as a
WebSocket session: open an episode, then call the tool once per step with the step's token in its
arguments, the reply carrying it back.

- `mcp`: standard MCP, stateless: `reset` opens an episode and returns its `episode_id`, each step is a
  `tools/call` of the tool with that `episode_id`, and `close` ends it.
- `ors`: `/create_session` mints a session id, `/create` opens and resets it, each step is a `/call`
  (answered as server-sent events), and `/delete` ends it.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any
from urllib.parse import urlsplit

import orjson

from .drivers import connect_failure
from .script import ActionTemplate, SessionScript

__all__ = ["HttpConnection", "McpDriver", "OrsDriver", "HTTP_PROTOCOLS"]

CLOSE_TIMEOUT_S = 5.0
_ids = itertools.count(1)


class HttpError(Exception):
    """A reply that ends the session: a refusal, an error answer, a dropped connection."""


class HttpConnection:
    """One kept-alive HTTP/1.1 connection: a request at a time, bodies by length or chunked."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.host_header = f"host: {host}:{port}\r\n".encode()

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def post(self, path: str, body: bytes, headers: bytes = b"") -> tuple[int, bytes]:
        """POST `body` (JSON) to `path`; the status and the whole response body."""
        assert self.reader is not None and self.writer is not None
        self.writer.write(b"POST %s HTTP/1.1\r\n%scontent-type: application/json\r\ncontent-length: %d\r\n%s\r\n%s" % (
            path.encode(), self.host_header, len(body), headers, body))
        reader = self.reader
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        lowered = head.lower()
        start = lowered.find(b"\r\ncontent-length:")
        if start >= 0:
            end = lowered.index(b"\r\n", start + 2)
            return status, await reader.readexactly(int(lowered[start + 17:end]))
        if b"\r\ntransfer-encoding: chunked" not in lowered:
            raise HttpError(f"HTTP {status} without a body length")
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status, b"".join(chunks)
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _reason(status: int, body: bytes) -> str:
    try:
        answer = orjson.loads(body.split(b"data: ")[-1]) if body.startswith(b"event:") else orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"HTTP {status}"
    if isinstance(answer, dict):
        if isinstance(answer.get("error"), dict):   # JSON-RPC
            return f"HTTP {status}: JSON-RPC error {answer['error'].get('code')}"
        if answer.get("reason") or answer.get("error"):   # ORS
            return f"HTTP {status}: {answer.get('reason') or 'error'}"
        result = answer.get("result")
        if isinstance(result, dict) and result.get("isError"):
            return f"HTTP {status}: tool error"
    return f"HTTP {status}"


class _HttpDriver:
    """What both HTTP drivers share: the connection, the step loop and the bounded close."""

    name = "http"
    path = "/"

    def __init__(self, url: str, script: SessionScript, tool: str = "echo") -> None:
        parts = urlsplit(url)
        self.connection = HttpConnection(parts.hostname or "127.0.0.1", parts.port or 80)
        self.script = script
        self.tool = tool
        self.headers = b""
        self.opened = False

    async def open(self) -> None:
        script = self.script
        script.connecting()
        try:
            await self.connection.connect()
        except Exception as error:
            script.fail(connect_failure(error))
            return
        try:
            await self.open_episode()
        except (HttpError, OSError, asyncio.IncompleteReadError, ValueError) as error:
            script.fail(f"open: {error}" if str(error) else f"open: {type(error).__name__}")
            return
        self.opened = True
        script.take(b"", "")

    async def open_episode(self) -> None:
        raise NotImplementedError

    def problem(self, status: int, body: bytes) -> str:
        raise NotImplementedError

    async def run_steps(self) -> None:
        script = self.script
        request = script.step_frame() if script.outcome is None and script.remaining else None
        while request is not None:
            try:
                status, body = await self.connection.post(self.path, request, self.headers)
            except (OSError, asyncio.IncompleteReadError):
                script.closed(None)
                return
            request = script.take(body, self.problem(status, body))

    async def close(self) -> None:
        try:
            if self.opened:
                await asyncio.wait_for(self.end_episode(), CLOSE_TIMEOUT_S)
        except (HttpError, OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            pass
        finally:
            self.connection.close()

    async def end_episode(self) -> None:
        raise NotImplementedError


class McpDriver(_HttpDriver):
    """A session over standard MCP: `reset`, then `tools/call` of the tool per step with the episode id, `close`."""

    name = "mcp"
    path = "/mcp"

    async def _call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        request = {"jsonrpc": "2.0", "id": next(_ids), "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}}
        status, body = await self.connection.post(self.path, orjson.dumps(request))
        problem = self.problem(status, body)
        if problem:
            raise HttpError(f"{tool}: {problem}")
        return orjson.loads(body)["result"]

    async def open_episode(self) -> None:
        episode = (await self._call("reset", {})).get("structuredContent", {}).get("episode_id")
        if not isinstance(episode, str):
            raise HttpError("reset returned no episode_id")
        self.episode = episode
        self.script.template = template = ActionTemplate(self.script.template.action, lambda action: {
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": self.tool, "arguments": {"episode_id": episode, **action}}})
        self.script.checks_echo = template.checks_echo

    def problem(self, status: int, body: bytes) -> str:
        if status == 200 and b'"isError":false' in body:
            return ""
        return _reason(status, body)

    async def end_episode(self) -> None:
        await self._call("close", {"episode_id": self.episode})


class OrsDriver(_HttpDriver):
    """A session over the Open Reward Standard: `/create_session`, `/create`, a `/call` per step, `/delete`."""

    name = "ors"
    path = "/call"

    async def open_episode(self) -> None:
        status, body = await self.connection.post("/create_session", b"{}")
        if status != 200 or b"event: task_id" not in body:
            raise HttpError(f"create_session: {_reason(status, body)}")
        sid = body.split(b"data: ", 1)[1].split(b"\n", 1)[0].strip()
        self.headers = b"x-session-id: %s\r\n" % sid
        status, body = await self.connection.post("/create", b'{"task_spec":{}}', self.headers)
        if status != 200:
            raise HttpError(f"create: {_reason(status, body)}")
        self.script.template = template = ActionTemplate(self.script.template.action,
                                                         lambda action: {"name": self.tool, "input": action})
        self.script.checks_echo = template.checks_echo

    def problem(self, status: int, body: bytes) -> str:
        if status == 200 and b'"ok":true' in body:
            return ""
        return _reason(status, body)

    async def end_episode(self) -> None:
        await self.connection.post("/delete", b"{}", self.headers)


HTTP_PROTOCOLS = {"mcp": McpDriver, "ors": OrsDriver}
