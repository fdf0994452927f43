"""`EnvClient`: drive one served environment session, asynchronously or (via `.sync()`) synchronously.

A session is one WebSocket connection. When it drops mid-episode, the pending call and every
later `step`, `state` or tool call raise `SessionLostError`; only `reset()` opens a new session,
because it starts a new episode anyway. Keepalive pings notice a vanished peer within
`ping_interval + ping_timeout` seconds. A call cancelled or timed out after its frame went out
ends the session the same way, so its reply can never be taken for a later call's.

Works against envkit servers and OpenEnv servers alike (reset, step, state, close).
"""

from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine, Self, Sequence, TypeVar

import httpx
import orjson
from pydantic import BaseModel
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ..errors import AuthenticationError, CapacityError, EnvConnectionError, EnvError, ProtocolError, SessionLostError
from ..protocol import API_KEY_ENV, API_KEY_HEADER
from ..protocol import FEATURES_HEADER, REFUSED_HEADER, SESSION_ID_HEADER, ErrorCode, close_reason
from .placement import Placement, is_registry_url, parse_server_urls
from .urls import http_url, websocket_url

__all__ = ["EnvClient", "SyncEnvClient", "StepResult", "ToolResult"]

T = TypeVar("T")


@dataclass
class StepResult:
    """What `reset` and `step` return: the observation, its reward and whether the episode ended.

    `text` is the observation as the environment renders it for a language model, and `metrics` the episode's
    metrics after this move (`Environment.episode_metrics()`); both from envkit servers only, None otherwise.
    """

    observation: Any
    reward: float | None
    done: bool
    metadata: dict[str, Any] = field(default_factory=dict)
    text: str | None = None
    metrics: dict[str, float] | None = None


@dataclass
class ToolResult:
    """What a tool call returns: the text for the agent, plus the observation when the tool acted, and the
    episode's metrics after the call (environments that declare metrics)."""

    tool: str
    text: str
    observation: Any = None
    reward: float | None = None
    done: bool | None = None
    metrics: dict[str, float] | None = None


def authentication_error(url: str, status: int, body: bytes, sent_key: bool) -> AuthenticationError:
    """The `AuthenticationError` for a 401/403 answer: what was wrong, and how to give a key."""
    try:
        answer = orjson.loads(body)
        detail, refusal = str(answer.get("detail", "")), answer.get("reason")
    except Exception:
        detail, refusal = "", None
    if status == 401:
        if sent_key:
            what = "the server refused the API key that was sent (wrong key)"
        else:
            what = "the server needs an API key and none was sent"
        reason = (f"{what}; pass EnvClient(url, api_key=...) or set {API_KEY_ENV} "
                  "(envkit commands: --api-key-env NAME)")
    else:
        reason = f"the server refused this client (HTTP {status}): {detail or 'forbidden'}"
    return AuthenticationError(url, reason, status, refusal)


def _handshake_refusal(status: int, body: bytes) -> str:
    """Why a handshake was refused with `status` (other than 401/403): the server's own words when it sent some."""
    try:
        detail = str(orjson.loads(body).get("detail") or "")
    except Exception:
        detail = ""
    if status == 404 and not detail:
        detail = "no WebSocket endpoint at this path; a server's sessions are at /ws under its root URL (http://HOST:PORT)"
    return f"handshake refused with HTTP {status}" + (f": {detail}" if detail else "")


class EnvClient:
    """Asynchronous client of one environment session.

    Example:
        async with EnvClient("http://127.0.0.1:8001") as env:
            result = await env.reset(seed=1)
            result = await env.step({"message": "hello"})

    Several servers of one environment (see `envkit.client.placement`): give `base_url` as a list or a
    comma-separated string of servers, or a registry URL (`http://head:8000/replicas`); each new
    session then opens on the least-loaded live server.

    Args:
        base_url: the server, as `http://host:port` or `ws://host:port[/ws]`; or several, or a registry.
        observation_cls: parse observations into this model instead of plain dicts.
        connect_timeout: seconds to open the connection.
        message_timeout: seconds to wait for a reply; past it the session is closed and lost.
        ping_interval, ping_timeout: keepalive; a silent peer is declared lost after both.
        headers: extra handshake headers.
        max_message_bytes: largest frame accepted from the server.
        api_key: sent as `X-API-Key` with the handshake and every HTTP request (default: `$ENVKIT_API_KEY`, if
            set; pass "" to send none). A refusal raises `AuthenticationError`.
    """

    def __init__(self, base_url: str | Sequence[str], *, observation_cls: type[BaseModel] | None = None, connect_timeout: float = 10.0,
                 message_timeout: float = 60.0, ping_interval: float | None = 5.0, ping_timeout: float | None = 5.0,
                 headers: dict[str, str] | None = None, max_message_bytes: int = 16 << 20,
                 api_key: str | None = None) -> None:
        servers = parse_server_urls(base_url)
        self.base_url = base_url if isinstance(base_url, str) else ",".join(servers)
        self.ws_url = websocket_url(servers[0])
        self.http_url = http_url(servers[0])
        self.observation_cls = observation_cls
        self.connect_timeout = connect_timeout
        self.message_timeout = message_timeout
        self.ping_interval = ping_interval
        self.ping_timeout = ping_timeout
        if api_key is None:
            api_key = os.environ.get(API_KEY_ENV) or ""
        headers = {**({API_KEY_HEADER: api_key} if api_key else {}), **(headers or {})}
        self.headers = {FEATURES_HEADER: "text,metrics", **headers}
        #: Chooses the server of each new session when there are several (None: one server).
        self.placement = (Placement.shared(servers, headers=headers)
                          if len(servers) > 1 or is_registry_url(servers[0]) else None)
        self.max_message_bytes = max_message_bytes
        self._ws: ClientConnection | None = None
        self._lost: SessionLostError | None = None
        self._lock = asyncio.Lock()
        self._close_callbacks: list[Callable[[], Awaitable[None]]] = []
        self._closing: set[asyncio.Future[None]] = set()   # connections of abandoned calls, closing
        self.session_id: str | None = None

    @classmethod
    def from_docker_image(cls, image: str, **options: Any) -> Self:
        """Start `image` with the Docker SDK and return a client for it; closing the client stops the container.

        Blocks until the container answers `/health`. Options: those of `envkit.client.docker.start_container`
        (`env_vars`, `memory`, `cpus`, `pids_limit`, `startup_timeout`, `docker_client`, `container_port`,
        `poll_interval`, `run_options`); the rest go to the constructor.
        """
        import inspect

        from .docker import start_container

        container_options = {name: options.pop(name) for name in inspect.signature(start_container).parameters
                             if name in options}
        running = start_container(image, **container_options)
        try:
            client = cls(running.url, **options)
        except BaseException:
            running.stop()
            raise

        async def stop_container() -> None:
            await asyncio.to_thread(running.stop)

        client.add_close_callback(stop_container)
        return client

    def add_close_callback(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Await `callback()` once when the client closes (e.g. to stop the container it runs against)."""
        self._close_callbacks.append(callback)

    # -- connection ---------------------------------------------------------------------------

    async def connect(self) -> EnvClient:
        """Open a new session (closing any previous one). Raises `CapacityError` when the server is full."""
        await self._drop()
        if self.placement is not None:
            return await self.placement.open_session(self._connect_to)
        return await self._connect_to(self.ws_url)

    async def _connect_to(self, server_url: str) -> EnvClient:
        self.ws_url, self.http_url = websocket_url(server_url), http_url(server_url)
        try:
            ws = await connect(self.ws_url, open_timeout=self.connect_timeout, ping_interval=self.ping_interval,
                               ping_timeout=self.ping_timeout, max_size=self.max_message_bytes,
                               additional_headers=self.headers, proxy=None, compression=None)
        except InvalidStatus as error:
            status = error.response.status_code
            if status in (401, 403):
                raise authentication_error(self.ws_url, status, error.response.body or b"",
                                           API_KEY_HEADER in self.headers) from None
            raise EnvConnectionError(self.ws_url, _handshake_refusal(status, error.response.body or b"")) from None
        except (OSError, InvalidHandshake, asyncio.TimeoutError) as error:
            raise EnvConnectionError(self.ws_url, f"{type(error).__name__}: {error}") from None
        response_headers = ws.response.headers if ws.response is not None else {}
        refused = response_headers.get(REFUSED_HEADER)
        if refused:
            await self._raise_refusal(ws, refused)
        self._ws = ws
        self._lost = None
        self.session_id = response_headers.get(SESSION_ID_HEADER)
        return self

    async def _raise_refusal(self, ws: ClientConnection, refused: str) -> None:
        try:
            frame = orjson.loads(await asyncio.wait_for(ws.recv(), self.connect_timeout))
            data = frame.get("data") or {}
        except Exception:
            data = {}
        finally:
            await ws.close()
        message = data.get("message", f"session refused ({refused})")
        if refused in ("capacity", "client_limit"):
            raise CapacityError(self.ws_url, message, data.get("active_sessions"), data.get("max_sessions"))
        if refused == "factory":
            raise EnvError(ErrorCode.FACTORY_ERROR, message)
        raise EnvConnectionError(self.ws_url, message)

    async def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            try:
                await ws.send('{"type":"close"}')
            except ConnectionClosed:
                pass
            await ws.close()

    async def close(self) -> None:
        """End the session and close the connection; safe to call more than once."""
        try:
            await self._drop()
            if self._closing:
                await asyncio.gather(*self._closing, return_exceptions=True)
        finally:
            callbacks, self._close_callbacks = self._close_callbacks, []
            for callback in callbacks:
                await callback()

    async def __aenter__(self) -> EnvClient:
        return await self.connect()

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    @property
    def connected(self) -> bool:
        """Whether a session is open (as far as the client knows)."""
        return self._ws is not None and self._lost is None

    # -- episode ------------------------------------------------------------------------------

    async def reset(self, /, **kwargs: Any) -> StepResult:
        """Start a new episode; opens a fresh session if the previous one was lost or never opened."""
        if self._ws is None or self._lost is not None:
            await self.connect()
        return self._step_result(await self._request({"type": "reset", "data": kwargs}, "observation"))

    async def step(self, action: BaseModel | dict[str, Any]) -> StepResult:
        """Apply one action (the env's Action model or a dict of its fields)."""
        data = action.model_dump() if isinstance(action, BaseModel) else action
        return self._step_result(await self._request({"type": "step", "data": data}, "observation"))

    async def state(self) -> dict[str, Any]:
        """The environment's current state."""
        return await self._request({"type": "state"}, "state")

    async def call(self, tool: str, /, **args: Any) -> ToolResult:
        """Call one of the environment's tools (envkit servers only); every keyword is one of its arguments."""
        data = await self._request({"type": "call", "data": {"tool": tool, "args": args}}, "tool_result")
        observation = data.get("observation")
        if observation is not None and self.observation_cls is not None:
            observation = self._parse_observation(data)
        return ToolResult(data.get("tool", tool), data.get("result", ""), observation, data.get("reward"), data.get("done"),
                          data.get("metrics"))

    # -- HTTP ---------------------------------------------------------------------------------

    async def tools(self) -> list[dict[str, Any]]:
        """The server's tool listing: function-calling JSON schemas."""
        return (await self._get("/tools"))["tools"]

    async def health(self) -> dict[str, Any]:
        """The server's `/health` document (status, active and maximum sessions); for several, their sum."""
        if self.placement is not None:
            return await self.placement.health()
        return await self._get("/health")

    async def metadata(self) -> dict[str, Any]:
        """The server's `/metadata` document."""
        return await self._get("/metadata")

    async def _get(self, path: str) -> dict[str, Any]:
        if self.placement is not None and self._ws is None:
            self.http_url = http_url(await self.placement.first_live())
        try:
            async with httpx.AsyncClient(timeout=self.connect_timeout, trust_env=False) as http:
                response = await http.get(self.http_url + path, headers=self.headers)
        except httpx.HTTPError as error:
            raise EnvConnectionError(self.http_url + path, f"{type(error).__name__}: {error}") from None
        if response.status_code in (401, 403):
            raise authentication_error(self.http_url + path, response.status_code, response.content,
                                       API_KEY_HEADER in self.headers)
        if response.status_code != 200:
            raise EnvConnectionError(self.http_url + path, f"HTTP {response.status_code}: {response.text[:200]}")
        try:
            document = response.json()
        except ValueError:
            document = None
        if not isinstance(document, dict):
            raise EnvConnectionError(self.http_url + path, "the answer is not a JSON object, so this is not an "
                                     f"envkit or OpenEnv server: {response.text[:200]!r}")
        return document

    # -- internals ----------------------------------------------------------------------------

    async def _request(self, frame: dict[str, Any], expected: str) -> Any:
        """Send one frame and read its reply, one call at a time.

        A call that is cancelled (or given up by `asyncio.timeout`, `wait_for`, or `message_timeout`) once its
        frame may have gone out ends the session: the next call raises `SessionLostError`, and `reset()` opens
        a fresh session. The reply still on its way belongs to the abandoned call, so the connection that would
        carry it is closed rather than read on. Reading and discarding it instead would keep the connection, but
        the caller could not know whether the abandoned action took effect, and the next call would wait behind
        the very reply the caller gave up on. A call cancelled before its frame went out changes nothing.
        """
        async with self._lock:
            if self._lost is not None:
                raise self._lost
            if self._ws is None:
                await self.connect()
            ws = self._ws
            assert ws is not None
            try:
                try:
                    await ws.send(orjson.dumps(frame).decode())
                except ConnectionClosed as error:
                    # A server that refuses a session (OpenEnv at capacity) may send its error frame and close
                    # before our first frame arrives: read what is queued, and lose the session for what follows.
                    closed_early: ConnectionClosed | None = error
                else:
                    closed_early = None
                try:
                    raw = await asyncio.wait_for(ws.recv(), self.message_timeout)
                except ConnectionClosed as error:
                    raise self._lose(error) from None
                except asyncio.TimeoutError:
                    raise self._abandon(ws, f"no reply within {self.message_timeout:g}s") from None
            except asyncio.CancelledError:
                self._abandon(ws, "a call was cancelled before its reply arrived")
                raise
            if closed_early is not None:
                self._lose(closed_early)
        reply = orjson.loads(raw)
        kind, data = reply.get("type"), reply.get("data") or {}
        if kind == "error":
            code = data.get("code", "UNKNOWN")
            details = {key: value for key, value in data.items() if key not in ("code", "message")}
            if code == ErrorCode.CAPACITY_REACHED:
                raise CapacityError(self.ws_url, data.get("message", "server at capacity"),
                                    data.get("active_sessions"), data.get("max_sessions"))
            raise EnvError(code, data.get("message", ""), details)
        if kind != expected:
            raise ProtocolError(f"expected a {expected!r} frame, got {kind!r}")
        return data

    def _abandon(self, ws: ClientConnection, why: str) -> SessionLostError:
        """Lose the session of a call given up while its reply may still come, and close its connection."""
        self._lost = SessionLostError(f"{why}; the session was closed so that its reply cannot be taken for a later "
                                      "call's", None, self.session_id)
        self._ws = None
        closing = asyncio.ensure_future(ws.close())
        self._closing.add(closing)
        closing.add_done_callback(self._closing.discard)
        return self._lost

    def _lose(self, error: ConnectionClosed) -> SessionLostError:
        frame = error.rcvd
        code = frame.code if frame is not None else None
        self._lost = SessionLostError(close_reason(code, frame.reason if frame is not None else ""), code, self.session_id)
        self._ws = None
        return self._lost

    def _parse_observation(self, data: dict[str, Any]) -> Any:
        observation = data.get("observation") or {}
        if self.observation_cls is None:
            return observation
        return self.observation_cls.model_validate({**observation, "reward": data.get("reward"),
                                                    "done": data.get("done", False)})

    def _step_result(self, data: dict[str, Any]) -> StepResult:
        return StepResult(self._parse_observation(data), data.get("reward"), bool(data.get("done", False)),
                          data.get("metadata") or {}, data.get("text"), data.get("metrics"))

    def sync(self) -> SyncEnvClient:
        """A synchronous client over this one (its calls run on a shared background event loop)."""
        return SyncEnvClient(self)


class _BackgroundLoop:
    """One daemon thread running an event loop for every synchronous client in the process."""

    _lock = threading.Lock()
    _loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def run(cls, coroutine: Coroutine[Any, Any, T]) -> T:
        with cls._lock:
            if cls._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="envkit-client-loop", daemon=True).start()
                cls._loop = loop
        future = asyncio.run_coroutine_threadsafe(coroutine, cls._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()   # interrupted (Ctrl-C): the call ends here, as a cancelled async call does
            raise


class SyncEnvClient:
    """The synchronous mirror of `EnvClient`: same methods, same errors, no `await`.

    Example:
        with EnvClient("http://127.0.0.1:8001").sync() as env:
            result = env.reset(seed=1)
            result = env.step({"message": "hello"})
    """

    def __init__(self, client: EnvClient) -> None:
        self.client = client

    @property
    def session_id(self) -> str | None:
        return self.client.session_id

    @property
    def connected(self) -> bool:
        return self.client.connected

    def connect(self) -> SyncEnvClient:
        _BackgroundLoop.run(self.client.connect())
        return self

    def close(self) -> None:
        _BackgroundLoop.run(self.client.close())

    def __enter__(self) -> SyncEnvClient:
        return self.connect()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def reset(self, /, **kwargs: Any) -> StepResult:
        return _BackgroundLoop.run(self.client.reset(**kwargs))

    def step(self, action: BaseModel | dict[str, Any]) -> StepResult:
        return _BackgroundLoop.run(self.client.step(action))

    def state(self) -> dict[str, Any]:
        return _BackgroundLoop.run(self.client.state())

    def call(self, tool: str, /, **args: Any) -> ToolResult:
        return _BackgroundLoop.run(self.client.call(tool, **args))

    def tools(self) -> list[dict[str, Any]]:
        return _BackgroundLoop.run(self.client.tools())

    def health(self) -> dict[str, Any]:
        return _BackgroundLoop.run(self.client.health())

    def metadata(self) -> dict[str, Any]:
        return _BackgroundLoop.run(self.client.metadata())
