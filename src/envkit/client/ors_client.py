"""A small synchronous client of the Open Reward Standard (HTTP + SSE), for training against and checking ORS servers.

    server = OrsServer("http://127.0.0.1:8080")          # an openreward-SDK server, or any envkit server
    server.splits(), server.tasks("train"), server.tools()
    session = server.open(split="train", index=0)        # POST /create_session, then /create
    session.prompt                                        # GET /prompt, as text
    result = session.call("echo", {"message": "hi"})     # POST /call, SSE read to the end
    session.close()                                       # POST /delete, /delete_session

Refusals raise envkit's errors: `EnvConnectionError` (unreachable), `CapacityError` (503/429 at
`/create`), `SessionLostError` (the server no longer has the session: 404/410), `EnvError` (the
call was refused: `{"ok": false, "reason"}` as `code`). The session is not pinged: servers
reap sessions idle far longer than an episode takes (the SDK's reference server: 15 minutes).
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import orjson

from ..errors import CapacityError, EnvConnectionError, EnvError, ProtocolError, SessionLostError
from ..protocol import key_headers
from .env_client import StepResult, ToolResult

__all__ = ["OrsServer", "OrsSession", "is_ors_server"]

_PATH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def is_ors_server(url: str, timeout: float = 10.0) -> bool:
    """Whether `url` answers the ORS catalogue (`GET /list_environments` with a list of names)."""
    try:
        reply = httpx.get(url.rstrip("/") + "/list_environments", timeout=timeout, follow_redirects=True,
                          headers=key_headers())
        return reply.status_code == 200 and isinstance(reply.json(), list)
    except (httpx.HTTPError, ValueError):
        return False


class OrsServer:
    """One environment of an ORS server: its catalogue, and sessions on it.

    Args:
        url: the server's origin, e.g. `http://127.0.0.1:8080` (ORS sits at the root).
        env_name: the environment to use; default: the first the server lists.
        timeout: seconds to wait for a reply (a running call sends a ping at least every 10 s).
    """

    def __init__(self, url: str, env_name: str | None = None, timeout: float = 60.0) -> None:
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=timeout, follow_redirects=True, headers=key_headers())
        try:
            names = self._json("GET", "/list_environments")
        except EnvError as error:
            raise ProtocolError(f"{self.url} does not answer the Open Reward Standard's GET /list_environments "
                                f"({error}); is this an ORS server?") from None
        if not isinstance(names, list) or not names:
            raise ProtocolError(f"{self.url}/list_environments lists no environments; is this an ORS server?")
        #: The environments the server lists.
        self.environments = [str(name) for name in names]
        if env_name is None:
            env_name = self.environments[0]
        elif env_name not in self.environments:
            raise ProtocolError(f"{self.url} serves {', '.join(self.environments)}, not {env_name!r}")
        self.env_name = env_name
        self._prefix = f"/{env_name}" if _PATH_NAME.match(env_name) else ""

    def close(self) -> None:
        self.http.close()

    def tools(self) -> list[dict[str, Any]]:
        """The tools, in the function-calling shape (`{"name", "description", "parameters"}`)."""
        listing = self._json("GET", self._prefix + "/tools")
        return [{"name": tool["name"], "description": tool.get("description") or "",
                 "parameters": _untitled(tool.get("input_schema") or {"type": "object", "properties": {}})}
                for tool in listing.get("tools", [])]

    def splits(self) -> list[str]:
        return [split["name"] if isinstance(split, dict) else str(split)
                for split in self._json("GET", self._prefix + "/splits")]

    def tasks(self, split: str) -> list[dict[str, Any]]:
        return list(self._json("POST", self._prefix + "/tasks", json={"split": split})["tasks"])

    def num_tasks(self, split: str) -> int:
        return int(self._json("POST", self._prefix + "/num_tasks", json={"split": split})["num_tasks"])

    def open(self, *, split: str | None = None, index: int | None = None,
             task_spec: dict[str, Any] | None = None) -> OrsSession:
        """A session for task `index` of `split`, or for `task_spec`; its prompt is read at once."""
        sid = None
        for event, data in self._sse("/create_session", {}, None):
            if event == "task_id":
                sid = data.strip()
        if not sid:
            raise ProtocolError(f"{self.url}/create_session sent no task_id event")
        body: dict[str, Any] = {"task_spec": task_spec} if task_spec is not None else {"split": split, "index": index}
        try:
            self._json("POST", "/create", json=body, sid=sid)
        except EnvError as error:
            if error.details.get("status") in (429, 503):
                raise CapacityError(self.url, error.message) from None
            raise
        session = OrsSession(self, sid)
        try:
            session.prompt = "\n".join(block.get("text", "") for block in self._json("GET", self._prefix + "/prompt",
                                                                                          sid=sid)
                                       if block.get("type") == "text")
        except BaseException:
            session.close()
            raise
        return session

    # -- HTTP --------------------------------------------------------------------------------

    def _json(self, method: str, path: str, *, json: Any = None, sid: str | None = None) -> Any:
        headers = {"X-Session-ID": sid} if sid else {}
        try:
            reply = self.http.request(method, path, json=json, headers=headers)
        except httpx.HTTPError as error:
            raise EnvConnectionError(self.url, f"{type(error).__name__}: {error}") from None
        _raise_for(reply, sid)
        try:
            return reply.json()
        except ValueError:
            raise ProtocolError(f"{self.url}{path} answered {reply.status_code} with no JSON") from None

    def _sse(self, path: str, body: dict[str, Any], sid: str | None) -> list[tuple[str, str]]:
        """POST and read the whole event stream: [(event, data), ...] up to `end` (ping comments skipped)."""
        headers = {"Accept": "text/event-stream", **({"X-Session-ID": sid} if sid else {})}
        events: list[tuple[str, str]] = []
        try:
            with self.http.stream("POST", path, json=body, headers=headers) as reply:
                if reply.status_code >= 400:
                    reply.read()
                    _raise_for(reply, sid)
                event, data = None, []
                for line in reply.iter_lines():
                    if not line:
                        if event:
                            events.append((event, "\n".join(data)))
                            if event in ("end", "error"):
                                return events
                        event, data = None, []
                    elif not line.startswith(":"):
                        field, _, value = line.partition(":")
                        if field == "event":
                            event = value.strip()
                        elif field == "data":
                            data.append(value.lstrip())
        except httpx.HTTPError as error:
            raise EnvConnectionError(self.url, f"{type(error).__name__}: {error}") from None
        raise ProtocolError(f"{self.url}{path}: the event stream ended without an end event")


class OrsSession:
    """One episode on an ORS server; `call` its tools, then `close`."""

    def __init__(self, server: OrsServer, session_id: str) -> None:
        self.server = server
        self.session_id = session_id
        self.prompt = ""
        self.closed = False

    def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Call a tool; `done` is the server's `finished`, `observation` its `metadata`.

        Raises:
            EnvError: the server refused the call (`code`: its reason, e.g. `INPUT_VALIDATION`, `EPISODE_FINISHED`).
            SessionLostError: the server no longer has the session.
        """
        server = self.server
        events = server._sse(server._prefix + "/call", {"name": tool, "input": arguments}, self.session_id)
        if events[-1][0] == "error":
            raise EnvError("EXECUTION_ERROR", events[-1][1] or "the tool failed")
        try:
            reply = orjson.loads("".join(data for event, data in events if event in ("chunk", "end")))
        except orjson.JSONDecodeError as error:
            raise ProtocolError(f"{server.url}: a call's result is not JSON ({error})") from None
        if not reply.get("ok"):
            reason = str(reply.get("reason") or "error")
            raise EnvError(reason.upper(), str(reply.get("error") or "the call was refused"))
        output = reply.get("output") or {}
        text = "\n".join(block.get("text", "") for block in output.get("blocks", []) if block.get("type") == "text")
        return ToolResult(tool, text, output.get("metadata"), output.get("reward"), bool(output.get("finished")))

    def close(self) -> None:
        """Delete the session on the server (errors ignored: it may be gone already)."""
        if self.closed:
            return
        self.closed = True
        for path in ("/delete", "/delete_session"):
            try:
                self.server.http.post(path, headers={"X-Session-ID": self.session_id})
            except httpx.HTTPError:
                return


class OrsEpisodeClient:
    """An `EnvClient`-shaped view of ORS sessions for the trainer's bound classes: `reset` opens a session."""

    def __init__(self, server: OrsServer, split: str) -> None:
        self.server = server
        self.split = split
        self.session: OrsSession | None = None

    @property
    def session_id(self) -> str | None:
        return self.session.session_id if self.session else None

    def reset(self, **row: Any) -> StepResult:
        """Open a session for the row's `task_index` (of this client's split), or with the row as the task spec."""
        self.close()
        if "task_index" in row:
            self.session = self.server.open(split=self.split, index=int(row["task_index"]))
        else:
            self.session = self.server.open(task_spec=row)
        return StepResult(observation={}, reward=None, done=False, text=self.session.prompt)

    def call(self, tool: str, **arguments: Any) -> ToolResult:
        if self.session is None:
            raise EnvError("NOT_RESET", "no session: reset() first")
        return self.session.call(tool, arguments)

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()


def _untitled(schema: Any) -> Any:
    """A JSON schema without pydantic's `title` annotations (a model reads the descriptions; TRL's schemas have none)."""
    if isinstance(schema, list):
        return [_untitled(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: _untitled(item) for name, item in value.items()}
        else:
            out[key] = _untitled(value)
    return out


def _raise_for(reply: httpx.Response, sid: str | None) -> None:
    if reply.status_code < 400:
        return
    try:
        body = reply.json()
    except ValueError:
        body = {}
    message = str(body.get("error") or body.get("detail") or _gist(reply)) if isinstance(body, dict) else _gist(reply)
    if sid and reply.status_code in (404, 410) and "/create" != reply.request.url.path:
        raise SessionLostError(message, session_id=sid)
    reason = body.get("reason") if isinstance(body, dict) else None
    raise EnvError(str(reason or f"HTTP_{reply.status_code}").upper(), message, {"status": reply.status_code})


def _gist(reply: httpx.Response, limit: int = 160) -> str:
    """A reply body that is not JSON, as one short line: its reason phrase for an HTML page, else its text with
    whitespace folded, cut at `limit` characters."""
    if "html" in reply.headers.get("content-type", "") or not reply.text.strip():
        return reply.reason_phrase
    text = " ".join(reply.text.split())
    return text if len(text) <= limit else text[:limit] + "..."
