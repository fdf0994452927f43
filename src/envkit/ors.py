"""The Open Reward Standard (ORS) at the server's root: HTTP + server-sent events over the one session pool.

An ORS client (the `openreward` SDK, TRL's `OpenRewardSpec`) lists an environment's splits, tasks
and tools, opens a session for one task, reads its prompt, calls tools and deletes the session:

    POST /create_session           SSE: `task_id` (a new session id), `end`; nothing is opened yet
    POST /create                   X-Session-ID; `{"split", "index"}` or `{"task_spec"}`: opens and resets
    GET  /prompt, /messages        the task's instruction and first observation, as text blocks
    GET  /task_tools, /tools       tool specs `{"name", "description", "input_schema"}`
    POST /call                     SSE: `task_id`, ping comments, `chunk`s, `end` with the tool's output
    POST /ping, /delete, /delete_session
    GET  /splits, /list_environments, /version;  POST /tasks, /num_tasks, /task, /task_range

Every route is served bare (the SDK without a variant calls `/call`) and under the environment's
name (`/wordle/call`). `GET /tools` is also envkit's own listing: a request carrying the ORS
client's headers (`X-Session-ID` or `X-Deployment`) gets the ORS shape, any other the
function-calling shape envkit's clients read; `GET /{name}/tools` is always ORS.

An ORS session is a detached session of the pool: it counts against `max_concurrent_envs`, is
reaped when idle (the SDK's `/ping` every 10 s keeps it alive), ends at shutdown, and a request for
one that has ended answers 410 with the reason, never a fresh game. Errors have the ORS shape
`{"ok": false, "error", "reason"}` (with `detail`, which the SDK shows); capacity and shutdown
answer 503 with `Retry-After`, which the SDK retries. `X-Secrets` is accepted and never read or
logged: envkit environments take no secrets.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import orjson
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError

from . import __version__
from .environment import Environment, Observation, UnknownSplitError
from .protocol import CloseCode, FrameError, tool_result_payload
from .sessions import Session, new_session_id
from .tools import ToolSpec
from .ws_handler import SessionHandler, SessionRefused

logger = logging.getLogger("envkit.server")

__all__ = ["OrsSurface", "OrsError", "PING_INTERVAL_S", "CHUNK_CHARS", "SESSION_HEADER"]

SESSION_HEADER = "x-session-id"
#: Headers only an ORS client sends; `GET /tools` answers it in the ORS shape.
ORS_CLIENT_HEADERS = (SESSION_HEADER, "x-deployment")
#: A comment line at least this often while a call runs (the SDK gives up after 30 s of silence).
PING_INTERVAL_S = 5.0
#: Results longer than this go out as several `chunk` events before the `end` event.
CHUNK_CHARS = 4096
#: Finished call results a session keeps for replay (a repeated call with the same `task_id`).
KEPT_RESULTS = 32
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_SPLIT_TYPES = ("train", "validation", "test")
_PATH_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


class OrsError(Exception):
    """A request the server answers with the ORS error shape and an HTTP status."""

    def __init__(self, status: int, reason: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        body = {"ok": False, "error": self.message, "reason": self.reason, "detail": self.message}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


@dataclass
class OrsEpisode:
    """What an ORS session keeps beside its environment: the task, its prompt and its recent calls by `task_id`
    (running: the task; finished: the result text, which holds no reference to the session)."""

    task: dict[str, Any]
    prompt: str
    finished: bool = False
    calls: OrderedDict[str, asyncio.Task[str] | str] = field(default_factory=OrderedDict)

    def remember(self, task_id: str, running: asyncio.Task[str]) -> None:
        """Keep a call for replay; once it finishes only its result is kept."""
        self.calls[task_id] = running
        while len(self.calls) > KEPT_RESULTS:
            self.calls.popitem(last=False)

        def finished(done: asyncio.Task[str]) -> None:
            if task_id in self.calls:
                self.calls[task_id] = _outcome(done)
        running.add_done_callback(finished)


class OrsSurface:
    """Serves one environment over ORS from the session pool that `/ws` uses."""

    def __init__(self, name: str, env_class: type[Environment], handler: SessionHandler) -> None:
        self.name = name.lower()
        self.env_class = env_class
        self.handler = handler
        self.pool = handler.pool
        self._episodes: WeakKeyDictionary[Session, OrsEpisode] = WeakKeyDictionary()
        self._creating: set[str] = set()
        self.tools_listing = {
            "tools": [_tool_spec(spec) for spec in handler.tools.values()],
            "terminal_tool": None,
            "supports_score_group": False,
        }

    def listing_for(self, request: Request) -> dict[str, Any] | None:
        """The ORS tool listing when `request` comes from an ORS client (its headers say so), else None."""
        return self.tools_listing if any(h in request.headers for h in ORS_CLIENT_HEADERS) else None

    @property
    def metadata(self) -> dict[str, Any]:
        """What `/metadata` says about this surface."""
        return {"served": True, "env_name": self.name, "routes": "/ (bare) and /" + self.name + "/"}

    def router(self) -> APIRouter:
        """The ORS routes, bare and under `/{name}` (when the name is a plain path segment)."""
        router = APIRouter(include_in_schema=False)
        prefixes = [""] + (["/" + self.name] if _PATH_NAME.match(self.name) else [])
        root_only = {"/create_session": ("POST", self.create_session), "/create": ("POST", self.create),
                     "/delete": ("POST", self.delete), "/delete_session": ("POST", self.delete_session),
                     "/ping": ("POST", self.ping), "/version": ("GET", self.version),
                     "/list_environments": ("GET", self.list_environments)}
        per_env = {"/splits": ("GET", self.splits), "/tasks": ("POST", self.tasks),
                   "/num_tasks": ("POST", self.num_tasks), "/task": ("POST", self.task),
                   "/task_range": ("POST", self.task_range), "/task_tools": ("GET", self.task_tools),
                   "/prompt": ("GET", self.prompt), "/messages": ("GET", self.messages),
                   "/call": ("POST", self.call)}
        for path, (method, endpoint) in root_only.items():
            router.add_api_route(path, _answering(endpoint), methods=[method])
        for prefix in prefixes:
            for path, (method, endpoint) in per_env.items():
                router.add_api_route(prefix + path, _answering(endpoint), methods=[method])
        if len(prefixes) > 1:   # bare GET /tools is envkit's route, which asks `listing_for`
            router.add_api_route(prefixes[1] + "/tools", _answering(self.tools), methods=["GET"])
        return router

    # -- catalogue: no session needed ---------------------------------------------------------

    async def version(self, request: Request) -> dict[str, Any]:
        return {"version": __version__, "build_sha": None, "server": "envkit"}

    async def list_environments(self, request: Request) -> list[str]:
        return [self.name]

    async def tools(self, request: Request) -> dict[str, Any]:
        return self.tools_listing

    async def splits(self, request: Request) -> list[dict[str, str]]:
        return [{"name": split, "type": split if split in _SPLIT_TYPES else "validation"}
                for split in self.env_class.splits()]

    async def tasks(self, request: Request) -> dict[str, Any]:
        split = _text(await _body(request), "split")
        return {"tasks": [dict(task) for task in self._tasks(split)], "env_name": self.name}

    async def num_tasks(self, request: Request) -> dict[str, Any]:
        return {"num_tasks": len(self._tasks(_text(await _body(request), "split")))}

    async def task(self, request: Request) -> dict[str, Any]:
        body = await _body(request)
        return {"task": self._task(_text(body, "split"), _integer(body, "index")), "env_name": self.name}

    async def task_range(self, request: Request) -> dict[str, Any]:
        body = await _body(request)
        tasks = self._tasks(_text(body, "split"))
        start, stop = _integer(body, "start", optional=True), _integer(body, "stop", optional=True)
        return {"tasks": [dict(task) for task in tasks[slice(start, stop)]], "env_name": self.name}

    # -- sessions -----------------------------------------------------------------------------

    async def create_session(self, request: Request) -> Response:
        """Mint a session id (SSE, as the SDK reads it); the environment opens at `/create`."""
        return _sse(_events(("task_id", new_session_id()), ("end", "")))

    async def create(self, request: Request) -> dict[str, Any]:
        """Open a session for one task: a pool slot, a fresh environment, reset with the task's arguments."""
        sid = _session_id(request)
        body = await _body(request)
        if self.pool.get(sid) is not None or sid in self._creating:
            raise OrsError(409, "input_validation", f"session {sid} already exists; call /create once per session")
        self._gone_if_ended(sid)
        env_name = body.get("env_name")
        if env_name is not None and str(env_name).lower() != self.name:
            raise OrsError(404, "not_found", f"unknown environment {env_name!r}; this server serves {self.name!r}")
        if body.get("toolset_name") is not None:
            raise OrsError(400, "input_validation", "envkit servers have no built-in toolsets; leave toolset out")
        task = self._requested_task(body)   # no await from the check above to here: one /create per id wins
        self._creating.add(sid)
        try:
            try:
                session = await self.handler.open_detached(session_id=sid)
            except SessionRefused as refused:
                raise _refusal_error(refused) from None
            try:
                async with session.in_use():
                    first = await session.reset(self.handler.reset_kwargs(task))
                if not isinstance(first, Observation):
                    raise TypeError(f"reset() returned {type(first).__name__}, expected an Observation")
                parts = (self.env_class.task_prompt(task), first.as_text())
                prompt = "\n\n".join(part.strip() for part in parts if part)
            except Exception as error:
                await session.end(CloseCode.NORMAL, "the task could not be started")
                if isinstance(error, FrameError):
                    raise OrsError(400, "input_validation", error.message) from None
                raise OrsError(400, "input_validation", f"the environment could not start this task ("
                               f"{_arguments(task)}): {type(error).__name__}: {error}") from None
        finally:
            self._creating.discard(sid)
        self._episodes[session] = OrsEpisode(task, prompt, finished=first.done)
        return {"sid": sid}

    async def delete(self, request: Request) -> dict[str, Any]:
        """End the session and close its environment; deleting one that is gone is not an error."""
        sid = _session_id(request)
        session = self.pool.get(sid)
        if session is not None and session in self._episodes:   # an ORS session; never a /ws one
            async with session.in_use():   # a call still running finishes first
                await session.end(CloseCode.NORMAL, "deleted by the client")
        return {"sid": sid}

    async def delete_session(self, request: Request) -> dict[str, Any]:
        return await self.delete(request)

    async def ping(self, request: Request) -> dict[str, Any]:
        session, _ = self._session(request)
        session.last_active = time.monotonic()   # the idle reaper leaves a pinged session alone
        return {"status": "ok"}

    async def prompt(self, request: Request) -> list[dict[str, Any]]:
        _, episode = self._session(request)
        return [_text_block(episode.prompt)]

    async def messages(self, request: Request) -> list[dict[str, Any]]:
        _, episode = self._session(request)
        return [{"role": "user", "blocks": [_text_block(episode.prompt)], "detail": None}]

    async def task_tools(self, request: Request) -> dict[str, Any]:
        self._session(request)
        return self.tools_listing

    async def call(self, request: Request) -> Response:
        """Run a tool (or resume a call by its `task_id`) and stream the result as the SDK reads it."""
        session, episode = self._session(request)
        body = await _body(request)
        task_id = body.get("task_id")
        if task_id is not None:
            running = episode.calls.get(str(task_id))
            if running is None:
                raise OrsError(404, "not_found", f"no call with task_id {task_id!r} on session {session.id} (the "
                               f"last {KEPT_RESULTS} results are kept); make the call again without task_id")
            return _sse(self._stream(str(task_id), running))
        name, arguments = body.get("name"), body.get("input", {})
        if not isinstance(name, str):
            raise OrsError(400, "bad_input_shape", 'expected {"name": tool, "input": {...}}')
        task_id = new_session_id()
        running = asyncio.get_running_loop().create_task(self._run_call(session, episode, name, arguments))
        episode.remember(task_id, running)
        return _sse(self._stream(task_id, running))

    async def _run_call(self, session: Session, episode: OrsEpisode, name: str, arguments: Any) -> str:
        """One tool call, as the JSON text of the ORS result (`ok` true with the output, or false with why)."""
        spec = self.handler.tools.get(name)
        if spec is None:
            known = ", ".join(sorted(self.handler.tools)) or "none"
            return _failure("not_found", f"{name!r} is not a valid tool; this environment's tools: {known}")
        if not isinstance(arguments, dict):
            return _failure("bad_input_shape", f"the input of {name} must be a JSON object of its arguments")
        async with session.in_use():
            if session.ended is not None:
                return _failure("session_ended", f"the session ended before the call ran ({session.ended[1]})")
            if episode.finished:
                return _failure("episode_finished", f"{name!r} was not run: the episode has finished; "
                                "create a new session for another episode")
            try:
                checked = spec.validate_arguments(arguments)
            except ValidationError as error:
                return _failure("input_validation", f"Tool input validation error: {_summary(error)}")
            try:
                result = await session.call_tool(spec, checked)
            except Exception as error:
                return _failure("execution_error", f"{name} raised {type(error).__name__}: {error}; "
                                "the session carries on")
        payload = tool_result_payload(spec.name, result)
        episode.finished = bool(payload["done"])
        output = {"blocks": [_text_block(payload["result"])], "metadata": payload["observation"],
                  "reward": payload["reward"], "finished": episode.finished}
        return orjson.dumps({"ok": True, "output": output}, option=orjson.OPT_SERIALIZE_NUMPY).decode()

    async def _stream(self, task_id: str, running: asyncio.Task[str] | str) -> AsyncIterator[str]:
        """The SSE body of a call: its task_id, a ping comment while it runs, then its result in chunks."""
        yield _event("task_id", task_id)
        if not isinstance(running, str):
            while not running.done():
                finished, _ = await asyncio.wait({running}, timeout=PING_INTERVAL_S)
                if not finished:
                    yield ": ping\n\n"
            running = _outcome(running)
        pieces = _chunks(running)
        for index, piece in enumerate(pieces):
            yield _event("end" if index == len(pieces) - 1 else "chunk", piece)

    # -- helpers ------------------------------------------------------------------------------

    def _tasks(self, split: str) -> Any:
        try:
            return self.env_class.tasks(split)
        except UnknownSplitError as error:
            raise OrsError(404, "not_found", error.message) from None

    def _task(self, split: str, index: int) -> dict[str, Any]:
        try:
            return self.env_class.task(split, index)
        except UnknownSplitError as error:
            raise OrsError(404, "not_found", error.message) from None

    def _requested_task(self, body: dict[str, Any]) -> dict[str, Any]:
        spec, split, index = body.get("task_spec"), body.get("split"), body.get("index")
        by_index = split is not None or index is not None
        if (spec is not None) == by_index:
            raise OrsError(400, "input_validation", 'give either "task_spec" or both "split" and "index", not both '
                           "or neither")
        if spec is not None:
            if not isinstance(spec, dict):
                raise OrsError(400, "input_validation", '"task_spec" must be a JSON object of reset arguments')
            return dict(spec)
        return self._task(_text(body, "split"), _integer(body, "index"))

    def _session(self, request: Request) -> tuple[Session, OrsEpisode]:
        sid = _session_id(request)
        session = self.pool.get(sid)
        episode = self._episodes.get(session) if session is not None else None
        if session is None or episode is None:
            self._gone_if_ended(sid)
            raise OrsError(404, "not_found", f"no session {sid} on this server; open one with /create_session "
                           "and /create")
        return session, episode

    def _gone_if_ended(self, sid: str) -> None:
        ended = self.pool.ended(sid)
        if ended is not None:
            raise OrsError(410, "session_ended", f"session {sid} has ended ({ended[1]}); its episode cannot "
                           "continue: create a new session")


def _answering(endpoint: Any) -> Any:
    """Wrap a route so that `OrsError` becomes its JSON answer, and environment code that raised (a task list, a
    task prompt) a 500 in the ORS shape that names the error, with the traceback in the server's log."""
    async def route(request: Request) -> Any:
        try:
            return await endpoint(request)
        except OrsError as error:
            return error.response()
        except Exception as error:
            logger.exception("ORS %s failed", request.url.path)
            return OrsError(500, "environment_error", f"{type(error).__name__}: {error}").response()
    route.__name__ = f"ors_{endpoint.__name__}"
    route.__doc__ = endpoint.__doc__
    return route


def _outcome(done: asyncio.Task[str]) -> str:
    """The result text of a finished call task (it catches everything but cancellation, at shutdown)."""
    if done.cancelled() or done.exception() is not None:
        return _failure("session_ended", "the call was interrupted: the server is shutting down")
    return done.result()


def _refusal_error(refused: SessionRefused) -> OrsError:
    refusal = refused.refusal
    if refusal.kind == "factory":
        return OrsError(500, "environment_error", str(refused))
    if refusal.kind == "client_limit":   # this client holds its share (--max-sessions-per-client)
        return OrsError(429, refusal.kind, refusal.message, {"Retry-After": "1"})
    message = ("server at capacity: every session slot is taken; retry later or start the server with a higher "
               "--max-concurrent-envs") if refusal.kind == "capacity" else "server is shutting down"
    return OrsError(503, refusal.kind, message, {"Retry-After": "1"})


def _tool_spec(spec: ToolSpec) -> dict[str, Any]:
    function = spec.schema()["function"]
    return {"name": function["name"], "description": function.get("description", ""),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}}}


def _session_id(request: Request) -> str:
    sid = request.headers.get(SESSION_HEADER, "").strip()
    if not sid:
        raise OrsError(400, "input_validation", "the X-Session-ID header is required; get an id from "
                       "POST /create_session")
    return sid


async def _body(request: Request) -> dict[str, Any]:
    raw = await request.body()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise OrsError(400, "bad_input_shape", f"the request body is not JSON ({error})") from None
    if not isinstance(body, dict):
        raise OrsError(400, "bad_input_shape", "the request body must be a JSON object")
    return body


def _text(body: dict[str, Any], key: str) -> str:
    value = body.get(key)
    if not isinstance(value, str):
        raise OrsError(400, "input_validation", f'"{key}" is required and must be a string')
    return value


def _integer(body: dict[str, Any], key: str, optional: bool = False) -> Any:
    value = body.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise OrsError(400, "input_validation", f'"{key}" must be an integer')
    return value


def _arguments(task: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in task.items())


def _summary(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in item['loc']) or '(input)'}: {item['msg']}"
                     for item in error.errors(include_url=False))


def _failure(reason: str, message: str) -> str:
    return orjson.dumps({"ok": False, "error": message, "reason": reason}).decode()


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text, "detail": None}


def _chunks(text: str) -> list[str]:
    """`text` in pieces of about `CHUNK_CHARS`; no piece starts with whitespace (SSE readers strip it)."""
    pieces, start = [], 0
    while len(text) - start > CHUNK_CHARS:
        cut = start + CHUNK_CHARS
        while cut > start + 1 and text[cut].isspace():
            cut -= 1
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return pieces


def _event(name: str, data: str) -> str:
    return f"event: {name}\ndata: {data}\n\n"


async def _events(*events: tuple[str, str]) -> AsyncIterator[str]:
    for name, data in events:
        yield _event(name, data)


def _sse(body: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(body, media_type="text/event-stream", headers=_SSE_HEADERS)
