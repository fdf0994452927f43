"""`create_app`: serve an environment over WebSocket as a FastAPI app."""

from __future__ import annotations

import contextlib
import typing
from typing import Any, AsyncIterator, Callable

from fastapi import FastAPI
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket

from .environment import Action, Environment, Observation
from .errors import ConfigurationError
from .episode_metrics import check_metrics
from .mcp import McpEndpoint
from .metrics import ServerMetrics
from .ors import OrsSurface
from .routes import Documents, build_router
from .sessions import SessionPool
from .tools import tool_specs
from .web import mount_web
from .ws_handler import SessionHandler

__all__ = ["create_app", "EnvkitApp", "DEFAULT_MAX_MESSAGE_BYTES", "MAX_FRAME_BYTES", "HANDSHAKE_TIMEOUT_S"]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
#: The transports' own frame limit: larger frames close the connection (1009) instead of getting an error frame.
MAX_FRAME_BYTES = max(16 << 20, DEFAULT_MAX_MESSAGE_BYTES * 4)
#: Seconds a connection may take to send its request head (the WebSocket handshake) on either transport.
HANDSHAKE_TIMEOUT_S = 10.0


def create_app(
    env: type[Environment] | Callable[[], Environment],
    action_cls: type[Action],
    observation_cls: type[Observation],
    *,
    env_name: str | None = None,
    env_class: type[Environment] | None = None,
    max_concurrent_envs: int = 1,
    session_timeout_s: float | None = 300.0,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    max_workers: int | None = None,
    capacity_wait_s: float = 1.0,
    ping_interval_s: float | None = 20.0,
    ping_timeout_s: float = 20.0,
    metadata: dict[str, Any] | None = None,
) -> FastAPI:
    """Build a FastAPI app serving `env` at WebSocket `/ws` (one environment per connection) and `/mcp`.

    The same sessions are also open to Open Reward Standard clients at the server's root (`envkit.ors`).

    Args:
        env: the environment class, or a factory returning a fresh environment per session.
        action_cls: the `Action` model that `step` frames are validated against.
        observation_cls: the `Observation` model, published at `/schema`.
        env_name: name shown at `/metadata`; defaults to the class name.
        env_class: the class a factory builds, when `env` is not a class and has no return annotation.
        max_concurrent_envs: sessions open at once; above 1 needs `SUPPORTS_CONCURRENT_SESSIONS`.
        session_timeout_s: close sessions idle this long (None: never).
        max_message_bytes: larger client frames get a `MESSAGE_TOO_BIG` error.
        max_workers: threads for synchronous environment code (bounded; default min(32, sessions)).
        capacity_wait_s: a connection that finds every slot taken waits this long for one that a closing
            session gives back before it is refused (0: refuse at once). The picows transport, which
            answers the handshake first, waits only while a session is closing.
        ping_interval_s: the server pings a client after this many seconds (None: never); a client that
            does not answer within `ping_timeout_s` is gone (a cut network, a dead host) and its session ends,
            freeing the slot well before `session_timeout_s`.
        ping_timeout_s: seconds to wait for the pong.
        metadata: extra fields for `/metadata`.

    Besides `/ws` and the HTTP documents, the app serves a page at `/web` to play the environment
    and replay transcripts in a browser (`/` redirects there; see `envkit.web`).

    Raises:
        ConfigurationError: settings that cannot work, e.g. concurrency the environment does not support.
        ToolDefinitionError: a `@tool` method that cannot be described to a model.
    """
    env_class = env_class or _environment_class(env)
    if max_concurrent_envs < 1:
        raise ConfigurationError(f"max_concurrent_envs must be at least 1, got {max_concurrent_envs}")
    if max_concurrent_envs > 1 and not env_class.SUPPORTS_CONCURRENT_SESSIONS:
        raise ConfigurationError(
            f"{env_class.__qualname__} does not declare SUPPORTS_CONCURRENT_SESSIONS = True, so it cannot serve "
            f"{max_concurrent_envs} sessions at once; set it on the class if instances share no state, "
            "or use max_concurrent_envs=1")
    if session_timeout_s is not None and session_timeout_s <= 0:
        raise ConfigurationError(f"session_timeout_s must be positive or None, got {session_timeout_s}")
    if not (isinstance(action_cls, type) and issubclass(action_cls, Action)):
        raise ConfigurationError(f"action_cls must be an envkit Action subclass, got {action_cls!r}")
    if not (isinstance(observation_cls, type) and issubclass(observation_cls, Observation)):
        raise ConfigurationError(f"observation_cls must be an envkit Observation subclass, got {observation_cls!r}")

    tools = tool_specs(env_class)
    check_metrics(env_class.METRICS, env_class.__qualname__)
    if capacity_wait_s < 0:
        raise ConfigurationError(f"capacity_wait_s must be 0 or more seconds, got {capacity_wait_s}")
    if (ping_interval_s is not None and ping_interval_s <= 0) or ping_timeout_s <= 0:
        raise ConfigurationError(f"ping_interval_s must be positive or None and ping_timeout_s positive, got "
                                 f"{ping_interval_s} and {ping_timeout_s}")
    metrics = ServerMetrics()
    pool = SessionPool(max_concurrent_envs, session_timeout_s, max_workers, capacity_wait_s, ping_interval_s,
                       ping_timeout_s, metrics)
    handler = SessionHandler(env, env_class, action_cls, tools, pool, max_message_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await pool.shutdown()

    name = env_name or env_class.__name__
    documents = Documents.describe(name, env_class, action_cls, observation_cls, tools, pool, metadata or {})
    app = EnvkitApp(title=f"{name} (envkit)", lifespan=lifespan)
    app.session_handler = handler
    app.documents = documents
    app.state.envkit_pool = pool
    app.state.envkit_metrics = metrics
    ors = OrsSurface(name, env_class, handler)
    documents.metadata["ors"] = ors.metadata
    # The per-call routes come first: FastAPI tries routes in order, and the ORS router holds dozens.
    app.add_api_websocket_route("/ws", handler)
    mcp = McpEndpoint(handler, env_class, name, documents.metadata["description"])
    app.add_route("/mcp", mcp.handle, methods=["GET", "POST", "DELETE"], include_in_schema=False)
    app.include_router(build_router(documents, other_tool_listing=ors.listing_for))
    app.include_router(ors.router())
    documents.metadata["web"] = mount_web(app, env_class)
    return app


class EnvkitApp(FastAPI):
    """FastAPI, with connections to `/ws` handed straight to the session handler.

    For a WebSocket session, FastAPI's middleware, routing and dependency layers do nothing but
    cost memory (their suspended calls live as long as the session, ~8 kB each) and a call per
    message. They are skipped unless middleware was added to the app; then `/ws` takes the
    ordinary route, which serves it the same way.
    """

    session_handler: SessionHandler | None = None
    #: The documents of the HTTP routes; other transports (`picows_server`) serve the same ones.
    documents: Documents | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (scope["type"] == "websocket" and scope["path"] == "/ws" and self.session_handler is not None
                and not self.user_middleware and not self.root_path and not scope.get("root_path")):
            scope["app"] = self
            await self.session_handler.serve(WebSocket(scope, receive, send), receive, send)
            return
        await super().__call__(scope, receive, send)


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

