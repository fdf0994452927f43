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
import itertools
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import orjson
from pydantic import ValidationError
from starlette.requests import Request

from ..core.eager import Resumed, first_step
from ..core.served_env import ServedEnv, SessionRefused
from ..core.sessions import Session, new_session_id
from ..environment import Environment, Observation, UnknownSplitError, opening_text
from ..protocol import CloseCode, FrameError, to_json, tool_result_payload
from ..tools import ToolSpec
from ..version import __version__
from ..core.http_exchange import EVENT_STREAM, BodyTooLarge, ClientGone, Exchange, ExchangeEndpoint

logger = logging.getLogger("envkit.server")

__all__ = ["OrsSurface", "OrsError", "PING_INTERVAL_S", "CHUNK_CHARS", "SESSION_HEADER"]

SESSION_HEADER = "x-session-id"
_SESSION_HEADER = SESSION_HEADER.encode()
#: Headers only an ORS client sends; `GET /tools` answers it in the ORS shape.
ORS_CLIENT_HEADERS = (SESSION_HEADER, "x-deployment")
#: A comment line at least this often while a call runs (the SDK gives up after 30 s of silence).
PING_INTERVAL_S = 5.0
#: Results longer than this go out as several `chunk` events before the `end` event.
CHUNK_CHARS = 4096
#: Finished call results a session keeps for replay (a repeated call with the same `task_id`).
KEPT_RESULTS = 32
_SSE_HEADERS = (("cache-control", "no-cache"), ("x-accel-buffering", "no"))
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

    async def answer(self, exchange: Exchange) -> None:
        body = {"ok": False, "error": self.message, "reason": self.reason, "detail": self.message}
        await exchange.respond_json(self.status, body, self.headers.items())


@dataclass
class OrsEpisode:
    """What an ORS session keeps beside its environment: the task, its prompt and its recent calls by `task_id`
    (running: the task; finished: the result text, which holds no reference to the session)."""

    task: dict[str, Any]
    prompt: str
    finished: bool = False
    calls: OrderedDict[str, asyncio.Task[str] | str] = field(default_factory=OrderedDict)

    def remember(self, task_id: str, call: asyncio.Task[str] | str) -> None:
        """Keep a call (running, or its result) for replay; once it finishes only its result is kept."""
        calls = self.calls
        calls[task_id] = call
        if len(calls) > KEPT_RESULTS:
            calls.popitem(last=False)
        if isinstance(call, str):
            return

        def finished(done: asyncio.Task[str]) -> None:
            if task_id in calls:
                calls[task_id] = _outcome(done)
        call.add_done_callback(finished)


@dataclass(slots=True)
class EventStream:
    """An answer of server-sent events: all of it at once (`text`), or as a running call yields it (`pieces`)."""

    text: str = ""
    pieces: AsyncIterator[str] | None = None


class OrsSurface(ExchangeEndpoint):
    """Serves one environment over ORS from the session pool that `/ws` uses."""

    def __init__(self, name: str, env_class: type[Environment], served: ServedEnv) -> None:
        self.name = name.lower()
        self.env_class = env_class
        self.served = served
        self.pool = served.pool
        self._episodes: WeakKeyDictionary[Session, OrsEpisode] = WeakKeyDictionary()
        self._creating: set[str] = set()
        # A call's task_id: a prefix drawn once and a counter, unique on this server without a system call per call
        # (a call is found by its id only within its own session, whose id is the secret).
        self._call_prefix = secrets.token_hex(8)
        self._call_numbers = itertools.count()
        self._routes = self._route_table()
        self.max_body_bytes = served.max_message_bytes
        self.tools_listing = {
            "tools": [_tool_spec(spec) for spec in served.tools.values()],
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

    def _route_table(self) -> dict[str, tuple[str, Any]]:
        """Path -> (method, handler): every route bare, and under `/{name}` when the name is a plain path segment."""
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
        table = dict(root_only)
        for prefix in prefixes:
            table.update({prefix + path: route for path, route in per_env.items()})
        if len(prefixes) > 1:   # bare GET /tools is envkit's route, which asks `listing_for`
            table[prefixes[1] + "/tools"] = ("GET", self.tools)
        return table

    def paths(self) -> list[str]:
        """The paths this surface answers (the app serves them straight to it: `EnvkitApp.serve_directly`)."""
        return list(self._routes)

    async def answer(self, exchange: Exchange) -> None:
        """A request to an ORS path: errors answer in the ORS shape, environment code that raised (a task list, a task
        prompt) a 500 that names the error, with the traceback in the server's log."""
        method, endpoint = self._routes[exchange.path]
        try:
            if exchange.method != method:
                raise OrsError(405, "method_not_allowed", f"{exchange.path} answers {method} only", {"Allow": method})
            answer = await endpoint(exchange)
        except OrsError as error:
            return await error.answer(exchange)
        except ClientGone:
            return
        except Exception as error:
            logger.exception("ORS %s failed", exchange.path)
            return await OrsError(500, "environment_error", f"{type(error).__name__}: {error}").answer(exchange)
        if not isinstance(answer, EventStream):
            await exchange.respond_json(200, answer)
        elif answer.pieces is None:
            await exchange.respond(200, answer.text.encode(), EVENT_STREAM, _SSE_HEADERS)
        else:
            await exchange.stream(200, EVENT_STREAM, _encoded(answer.pieces), _SSE_HEADERS)

    # -- catalogue: no session needed ---------------------------------------------------------

    async def version(self, exchange: Exchange) -> dict[str, Any]:
        return {"version": __version__, "build_sha": None, "server": "envkit"}

    async def list_environments(self, exchange: Exchange) -> list[str]:
        return [self.name]

    async def tools(self, exchange: Exchange) -> dict[str, Any]:
        return self.tools_listing

    async def splits(self, exchange: Exchange) -> list[dict[str, str]]:
        return [{"name": split, "type": split if split in _SPLIT_TYPES else "validation"}
                for split in self.env_class.splits()]

    async def tasks(self, exchange: Exchange) -> dict[str, Any]:
        split = _text(await self._body(exchange), "split")
        return {"tasks": [dict(task) for task in self._tasks(split)], "env_name": self.name}

    async def num_tasks(self, exchange: Exchange) -> dict[str, Any]:
        return {"num_tasks": len(self._tasks(_text(await self._body(exchange), "split")))}

    async def task(self, exchange: Exchange) -> dict[str, Any]:
        body = await self._body(exchange)
        return {"task": self._task(_text(body, "split"), _integer(body, "index")), "env_name": self.name}

    async def task_range(self, exchange: Exchange) -> dict[str, Any]:
        body = await self._body(exchange)
        tasks = self._tasks(_text(body, "split"))
        start, stop = _integer(body, "start", optional=True), _integer(body, "stop", optional=True)
        return {"tasks": [dict(task) for task in tasks[slice(start, stop)]], "env_name": self.name}

    # -- sessions -----------------------------------------------------------------------------

    async def create_session(self, exchange: Exchange) -> EventStream:
        """Mint a session id (SSE, as the SDK reads it); the environment opens at `/create`."""
        return EventStream(_event("task_id", new_session_id()) + _event("end", ""))

    async def create(self, exchange: Exchange) -> dict[str, Any]:
        """Open a session for one task: a pool slot, a fresh environment, reset with the task's arguments."""
        sid = _session_id(exchange)
        body = await self._body(exchange)
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
                session = await self.served.open_detached(session_id=sid)
            except SessionRefused as refused:
                raise _refusal_error(refused) from None
            try:
                async with session.in_use():
                    first = await session.reset(self.served.reset_kwargs(task))
                if not isinstance(first, Observation):
                    raise TypeError(f"reset() returned {type(first).__name__}, expected an Observation")
                prompt = opening_text(self.env_class.task_prompt(task), first.as_text().strip())
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

    async def delete(self, exchange: Exchange) -> dict[str, Any]:
        """End the session and close its environment; deleting one that is gone is not an error."""
        sid = _session_id(exchange)
        session = self.pool.get(sid)
        if session is not None and session in self._episodes:   # an ORS session; never a /ws one
            async with session.in_use():   # a call still running finishes first
                await session.end(CloseCode.NORMAL, "deleted by the client")
        return {"sid": sid}

    async def delete_session(self, exchange: Exchange) -> dict[str, Any]:
        return await self.delete(exchange)

    async def ping(self, exchange: Exchange) -> dict[str, Any]:
        session, _ = self._session(exchange)
        session.last_active = time.monotonic()   # the idle reaper leaves a pinged session alone
        return {"status": "ok"}

    async def prompt(self, exchange: Exchange) -> list[dict[str, Any]]:
        _, episode = self._session(exchange)
        return [_text_block(episode.prompt)]

    async def messages(self, exchange: Exchange) -> list[dict[str, Any]]:
        _, episode = self._session(exchange)
        return [{"role": "user", "blocks": [_text_block(episode.prompt)], "detail": None}]

    async def task_tools(self, exchange: Exchange) -> dict[str, Any]:
        self._session(exchange)
        return self.tools_listing

    async def call(self, exchange: Exchange) -> EventStream:
        """Run a tool (or resume a call by its `task_id`) and stream the result as the SDK reads it.

        A call that finishes without waiting (a tool of a `RUN_INLINE` environment) is answered in one piece;
        one that must wait runs as a task of its own, streamed while it runs, so that a repeated request with
        its `task_id` (after a dropped connection) finds it."""
        session, episode = self._session(exchange)
        body = await self._body(exchange)
        task_id = body.get("task_id")
        if task_id is not None:
            running = episode.calls.get(str(task_id))
            if running is None:
                raise OrsError(404, "not_found", f"no call with task_id {task_id!r} on session {session.id} (the "
                               f"last {KEPT_RESULTS} results are kept); make the call again without task_id")
            return _streamed(str(task_id), running)
        name, arguments = body.get("name"), body.get("input", {})
        if not isinstance(name, str):
            raise OrsError(400, "bad_input_shape", 'expected {"name": tool, "input": {...}}')
        task_id = f"{self._call_prefix}{next(self._call_numbers):016x}"
        call = self._run_call(session, episode, name, arguments)
        finished, outcome = first_step(call)
        if not finished:
            outcome = asyncio.get_running_loop().create_task(Resumed(call, outcome).run())
        episode.remember(task_id, outcome)
        return _streamed(task_id, outcome)

    async def _run_call(self, session: Session, episode: OrsEpisode, name: str, arguments: Any) -> str:
        """One tool call, as the JSON text of the ORS result (`ok` true with the output, or false with why)."""
        spec = self.served.tools.get(name)
        if spec is None:
            known = ", ".join(sorted(self.served.tools)) or "none"
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
                session.pool.metrics.environment_raised(session.id, error)
                return _failure("execution_error", f"{name} raised {type(error).__name__}: {error}; "
                                "the session carries on")
        payload = tool_result_payload(spec.name, result)
        episode.finished = bool(payload["done"])
        output = {"blocks": [_text_block(payload["result"])], "metadata": payload["observation"],
                  "reward": payload["reward"], "finished": episode.finished}
        return to_json({"ok": True, "output": output}, orjson.OPT_SERIALIZE_NUMPY).decode()

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

    async def _body(self, exchange: Exchange) -> dict[str, Any]:
        try:
            raw = await exchange.body(self.max_body_bytes)
        except BodyTooLarge as too_large:
            raise OrsError(413, "input_validation", f"{too_large}; send a smaller request") from None
        if not raw.strip():
            return {}
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise OrsError(400, "bad_input_shape", f"the request body is not JSON ({error})") from None
        if not isinstance(body, dict):
            raise OrsError(400, "bad_input_shape", "the request body must be a JSON object")
        return body

    def _session(self, exchange: Exchange) -> tuple[Session, OrsEpisode]:
        sid = _session_id(exchange)
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


def _session_id(exchange: Exchange) -> str:
    sid = (exchange.header(_SESSION_HEADER) or "").strip()
    if not sid:
        raise OrsError(400, "input_validation", "the X-Session-ID header is required; get an id from "
                       "POST /create_session")
    return sid


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


def _streamed(task_id: str, call: asyncio.Task[str] | str) -> EventStream:
    """The SSE answer to a call: its task_id, a ping comment every `PING_INTERVAL_S` while it runs, then its
    result in chunks (all at once when it has finished)."""
    if isinstance(call, str):
        return EventStream(_event("task_id", task_id) + _result_events(call))
    return EventStream(pieces=_while_running(task_id, call))


async def _while_running(task_id: str, running: asyncio.Task[str]) -> AsyncIterator[str]:
    yield _event("task_id", task_id)
    while not running.done():
        finished, _ = await asyncio.wait({running}, timeout=PING_INTERVAL_S)
        if not finished:
            yield ": ping\n\n"
    yield _result_events(_outcome(running))


def _result_events(result: str) -> str:
    if len(result) <= CHUNK_CHARS:   # nearly every result: one `end` event
        return _event("end", result)
    pieces = _chunks(result)
    return "".join(_event("end" if index == len(pieces) - 1 else "chunk", piece) for index, piece in enumerate(pieces))


async def _encoded(pieces: AsyncIterator[str]) -> AsyncIterator[bytes]:
    async for piece in pieces:
        yield piece.encode()
