"""`create_app`: serve an environment over WebSocket as a FastAPI app."""

from __future__ import annotations

import contextlib
import json
import typing
from typing import Any, AsyncIterator, Callable, Iterable

from fastapi import FastAPI
from starlette.routing import Match, WebSocketRoute
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from ..core.access import AccessPolicy
from ..core.metrics import ServerMetrics
from ..core.served_env import ServedEnv
from ..core.sessions import SessionPool, current_client
from ..environment import Action, Environment, Observation
from ..episode_metrics import check_metrics
from ..errors import ConfigurationError
from ..surfaces.documents import Documents, build_router
from ..surfaces.harbor_tasks import HarborTaskApi
from ..core.http_exchange import ExchangeEndpoint, RawHeaders, respond
from ..surfaces.mcp import McpEndpoint
from ..surfaces.ors import OrsSurface
from ..surfaces.web import mount_web
from ..surfaces.ws import SessionHandler
from ..tools import tool_specs
from .settings import DEFAULT_MAX_MESSAGE_BYTES, ServerSettings

__all__ = ["create_app", "EnvkitApp", "ServerSettings", "DEFAULT_MAX_MESSAGE_BYTES", "MAX_FRAME_BYTES",
           "HANDSHAKE_TIMEOUT_S"]

#: The transport's own frame limit: larger frames close the connection (1009) instead of getting an error frame.
MAX_FRAME_BYTES = max(16 << 20, DEFAULT_MAX_MESSAGE_BYTES * 4)
#: Seconds a connection may take to send its request head (the WebSocket handshake).
HANDSHAKE_TIMEOUT_S = 10.0


def create_app(
    env: type[Environment] | Callable[[], Environment],
    action_cls: type[Action],
    observation_cls: type[Observation],
    *,
    env_name: str | None = None,
    env_class: type[Environment] | None = None,
    metadata: dict[str, Any] | None = None,
    settings: ServerSettings | None = None,
    **setting_values: Any,
) -> FastAPI:
    """Build a FastAPI app serving `env` at WebSocket `/ws` (one environment per connection) and `/mcp`.

    The same sessions are also open to Open Reward Standard clients at the server's root (`envkit.surfaces.ors`), and
    an environment with task splits lists them under `/harbor_env/` as OpenEnv's Harbor Task API
    (`envkit.surfaces.harbor_tasks`).

    Args:
        env: the environment class, or a factory returning a fresh environment per session.
        action_cls: the `Action` model that `step` frames are validated against.
        observation_cls: the `Observation` model, published at `/schema`.
        env_name: name shown at `/metadata`; defaults to the class name.
        env_class: the class a factory builds, when `env` is not a class and has no return annotation.
        metadata: extra fields for `/metadata`.
        settings: the server's `ServerSettings` (default: the defaults, with `api_keys` from `$ENVKIT_API_KEY`).
        **setting_values: fields of `ServerSettings` to change (`max_concurrent_envs=64`, `api_keys=[...]`, ...).

    Besides `/ws` and the HTTP documents, the app serves a page at `/web` to play the environment
    and replay transcripts in a browser (`/` redirects there; see `envkit.surfaces.web`).

    Raises:
        ConfigurationError: settings that cannot work, e.g. concurrency the environment does not support.
        ToolDefinitionError: a `@tool` method that cannot be described to a model.
    """
    env_class = env_class or _environment_class(env)
    settings = ServerSettings.of(settings or ServerSettings.default(), **setting_values)
    if settings.max_concurrent_envs > 1 and not env_class.SUPPORTS_CONCURRENT_SESSIONS:
        raise ConfigurationError(
            f"{env_class.__qualname__} does not declare SUPPORTS_CONCURRENT_SESSIONS = True, so it cannot serve "
            f"{settings.max_concurrent_envs} sessions at once; set it on the class if instances share no state, "
            "or use max_concurrent_envs=1")
    if not (isinstance(action_cls, type) and issubclass(action_cls, Action)):
        raise ConfigurationError(f"action_cls must be an envkit Action subclass, got {action_cls!r}")
    if not (isinstance(observation_cls, type) and issubclass(observation_cls, Observation)):
        raise ConfigurationError(f"observation_cls must be an envkit Observation subclass, got {observation_cls!r}")

    tools = tool_specs(env_class)
    check_metrics(env_class.METRICS, env_class.__qualname__)
    access = AccessPolicy(settings.api_keys, settings.allowed_origins, settings.allowed_hosts,
                          settings.forwarded_allow_ips)
    metrics = ServerMetrics()
    pool = SessionPool(settings.max_concurrent_envs, settings.session_timeout_s, settings.max_workers,
                       settings.capacity_wait_s, settings.ping_interval_s, settings.ping_timeout_s, metrics,
                       settings.max_sessions_per_client)
    served = ServedEnv(env, env_class, action_cls, tools, pool, settings.max_message_bytes, access)
    handler = SessionHandler(served)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await pool.shutdown()

    name = env_name or env_class.__name__
    documents = Documents.describe(name, env_class, action_cls, observation_cls, tools, pool, metadata or {}, access)
    app = EnvkitApp(title=f"{name} (envkit)", lifespan=lifespan)
    app.access = access
    app.settings = settings
    app.served = served
    app.session_handler = handler
    app.documents = documents
    app.state.envkit_pool = pool
    app.state.envkit_metrics = metrics
    ors = OrsSurface(name, env_class, served)
    documents.metadata["ors"] = ors.metadata
    # The per-call routes come first: FastAPI tries routes in order, and the ORS router holds dozens.
    app.add_api_websocket_route("/ws", handler)
    app.serve_directly(["/mcp"], McpEndpoint(served, name, documents.metadata["description"]))
    app.serve_directly(ors.paths(), ors)
    if HarborTaskApi.serves(env_class):   # after ORS: an environment named harbor_env keeps OpenEnv's Task API there
        task_api = HarborTaskApi(served)
        app.serve_directly(task_api.paths(), task_api)
    app.include_router(build_router(documents, other_tool_listing=ors.listing_for))
    documents.metadata["web"] = mount_web(app, env_class, documents.metadata)
    return app


class EnvkitApp(FastAPI):
    """FastAPI, guarded by the app's `AccessPolicy`, with `/ws` and the per-call HTTP surfaces served straight.

    Every HTTP request and WebSocket handshake, to any route (added now or later), passes the
    access check first: a refused WebSocket is answered with an HTTP status and never accepted.

    For a WebSocket session, FastAPI's middleware, routing and dependency layers do nothing but
    cost memory (their suspended calls live as long as the session, ~8 kB each) and a call per
    message; for `/mcp` and ORS (`serve_directly`) they cost more CPU per call than the surface's
    own work. They are skipped unless middleware was added to the app; then these paths take
    ordinary routes to the same handlers, which serve them the same way. The default transport's fast
    path `at_once` goes one step further for requests to `/mcp` and ORS that need nothing of the access layer but
    its yes: it answers them with no ASGI cycle at all (`envkit.transport.fast.at_once`).
    """

    #: The settings the app was built with.
    settings: ServerSettings | None = None
    #: The environment as every surface serves it (`envkit.core.served_env`).
    served: ServedEnv | None = None
    session_handler: SessionHandler | None = None
    #: The documents of the HTTP routes (`envkit.surfaces.documents`).
    documents: Documents | None = None
    #: Who may use the app (keys, origins, hosts); None: everyone.
    access: AccessPolicy | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Surfaces answering HTTP requests to these exact paths, whatever the method (`serve_directly`).
        self.direct_http: dict[str, ExchangeEndpoint] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if self.access is not None and (kind == "http" or kind == "websocket"):
            send = await self._guard(scope, receive, send)
            if send is None:
                return
        if not self.user_middleware and not self.root_path and not scope.get("root_path"):
            if kind == "http":
                endpoint = self.direct_http.get(scope["path"])
                if endpoint is not None:
                    scope["app"] = self
                    await endpoint(scope, receive, send)
                    return
            elif kind == "websocket" and scope["path"] == "/ws" and self.session_handler is not None:
                scope["app"] = self
                await self.session_handler.serve(WebSocket(scope, receive, send), receive, send)
                return
        if kind == "websocket" and not self._has_websocket_route(scope):
            detail = (f"no WebSocket endpoint at {scope['path']}; this server's sessions are at /ws: give the client the "
                      "server's root URL, http://HOST:PORT with no path")
            await _deny_websocket(scope, receive, send, 404, json.dumps({"detail": detail, "reason": "not_found"}).encode(),
                                  [("content-type", "application/json")])
            return
        await super().__call__(scope, receive, send)

    def _has_websocket_route(self, scope: Scope) -> bool:
        return any(isinstance(route, WebSocketRoute) and route.matches(scope)[0] is Match.FULL for route in self.routes)

    def serve_directly(self, paths: Iterable[str], endpoint: ExchangeEndpoint) -> None:
        """Serve HTTP requests to `paths` (any method) with `endpoint` as a raw ASGI app, skipping FastAPI's routing
        and middleware, or through an ordinary route once the app has middleware. Not listed in the OpenAPI schema."""
        for path in paths:
            self.direct_http[path] = endpoint
            self.router.add_route(path, endpoint, include_in_schema=False)

    def bind(self, host: str) -> None:
        """Called by the server that runs the app with the address it listens on: the default `Host` rule (and
        what `/metadata` says of it) follows from it."""
        if self.access is not None:
            self.access.bind(host)
            if self.documents is not None:
                self.documents.metadata["access"] = self.access.describe()

    async def _guard(self, scope: Scope, receive: Receive, send: Send) -> Send | None:
        """Apply the access policy: None when the request was answered here (refused or a CORS preflight), else
        the `send` to go on with (adding CORS headers for an allowed cross-origin page)."""
        access = self.access
        assert access is not None
        headers = RawHeaders(scope["headers"])
        if scope["type"] == "http":
            preflight = access.preflight(scope["method"], headers)
            if preflight is not None:
                await respond(send, 204, b"", headers=preflight)
                return None
        server = scope.get("server")
        refusal = access.check(scope["path"], headers, server[0] if server else None)
        if refusal is not None:
            self.state.envkit_pool.metrics.refused(refusal.reason, refusal.message)
            if scope["type"] == "http":
                await respond(send, refusal.status, refusal.body(), headers=refusal.response_headers())
            else:
                await _deny_websocket(scope, receive, send, refusal.status, refusal.body(), refusal.response_headers())
            return None
        pool = self.state.envkit_pool
        if pool.max_sessions_per_client is not None and scope["type"] == "http":
            peer = scope.get("client")
            current_client.set(access.client_address(peer[0] if peer else None, headers))
        cors = access.cors_headers(headers) if scope["type"] == "http" else []
        if not cors:
            return send
        extra = [(name.encode(), value.encode()) for name, value in cors]

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        return send_with_cors


async def _deny_websocket(scope: Scope, receive: Receive, send: Send, status: int, body: bytes,
                          headers: list[tuple[str, str]]) -> None:
    """Refuse a WebSocket at the handshake with an HTTP status and JSON body; it is never accepted."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        raw = [(name.encode(), value.encode()) for name, value in headers]
        await send({"type": "websocket.http.response.start", "status": status, "headers": raw})
        await send({"type": "websocket.http.response.body", "body": body})
    else:   # a server without the denial-response extension answers 403
        await send({"type": "websocket.close", "code": 1008})


def _environment_class(env: Any) -> type[Environment]:
    if isinstance(env, type):
        if not issubclass(env, Environment):
            raise ConfigurationError(f"{env.__qualname__} is not an envkit Environment subclass")
        return env
    if callable(env):
        try:
            annotation = typing.get_type_hints(env).get("return")
        except Exception:
            annotation = None
        if isinstance(annotation, type) and issubclass(annotation, Environment):
            return annotation
        raise ConfigurationError("cannot tell which Environment class the factory builds; annotate its return type "
                                 "or pass env_class=... (the server checks it without building an environment)")
    raise ConfigurationError(f"env must be an Environment class or a factory, got {env!r}")

