"""Running an app with uvicorn: `run_server` for `envkit serve`, `EnvkitServer` for embedding and tests.

On SIGINT/SIGTERM (or `should_exit`), every session is closed with 1001 and its environment's
`close()` runs before uvicorn stops: plain uvicorn would close sockets with 1012 and wait for
sessions in a slow step.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import uvicorn
from fastapi import FastAPI

from ..app.asgi import MAX_FRAME_BYTES, EnvkitApp
from .fast import log_fast_paths, protocol_classes
from .listener import guarded_loop_factory
from .uvicorn_protocols import HeadLimits

__all__ = ["EnvkitServer", "server_config", "run_server", "running_server", "QuietWebSocketHandshakes"]


class _ServerLogFilter(logging.Filter):
    """Keeps secrets and refused clients out of uvicorn's log.

    - At debug level the WebSocket layer logs every handshake header: the values of `X-API-Key`,
      `Authorization` and `Cookie` are replaced by `<redacted>`.
    - Its sans-I/O WebSocket layer logs ERROR "ASGI callable returned without completing handshake"
      after every handshake refused with an HTTP response (how the access check refuses one): a refused
      client is not a server error, and must not be able to fill the log with them.
    """

    SECRET_HEADERS = frozenset({"x-api-key", "authorization", "cookie", "proxy-authorization"})

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == "ASGI callable returned without completing handshake.":
            return False
        args = record.args
        if (record.msg == "< %s: %s" and isinstance(args, tuple) and len(args) == 2
                and str(args[0]).lower() in self.SECRET_HEADERS):
            record.args = (args[0], "<redacted>")
        return True


_server_log_filter = _ServerLogFilter()


def server_config(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "info",
                  compression: bool = False, head_limits: HeadLimits | None = None, **overrides: Any) -> uvicorn.Config:
    """uvicorn settings for an envkit app: uvloop and httptools when installed, the sans-I/O websockets layer.

    `compression`: accept permessage-deflate when a client offers it (OpenEnv's client does). Off by
    default: for frames of a few hundred bytes it cost ~20 kB per session and ~55% more CPU per step.
    Keepalive pings follow the app's `ping_interval_s` / `ping_timeout_s` (see `create_app`). uvicorn's own
    proxy-header handling is off: the app's `forwarded_allow_ips` decides whom to believe, on every transport.
    `head_limits`: size and time limits on request heads and handshakes (see `envkit.transport.uvicorn_protocols`;
    default 64 KiB and 10 s), counted in the app's metrics. The fast paths are those `envkit.transport.fast` found
    working (`ENVKIT_FAST_PATHS=0`: none); one INFO line says which are off and why.
    """
    if isinstance(app, EnvkitApp):
        app.bind(host)
        logging.getLogger("uvicorn.error").addFilter(_server_log_filter)
    state = getattr(app, "state", None)
    pool = getattr(state, "envkit_pool", None)
    keepalive = {} if pool is None else {"ws_ping_interval": pool.ping_interval_s,
                                         "ws_ping_timeout": pool.ping_timeout_s}
    http, ws = protocol_classes(head_limits or HeadLimits(getattr(state, "envkit_metrics", None)))
    settings: dict[str, Any] = {
        **keepalive, "ws": ws, "ws_max_size": MAX_FRAME_BYTES, "ws_per_message_deflate": compression,
        "timeout_graceful_shutdown": 5, "loop": "auto", "http": http,
        "lifespan": "on", "proxy_headers": False, **overrides,
    }
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, **settings)
    log_fast_paths()   # after uvicorn's logging is set up
    return config


class EnvkitServer(uvicorn.Server):
    """A uvicorn server that ends every session (close 1001, `env.close()`) before shutting down.

    `on_started` is called with the bound port once the server listens (useful with port 0). `run()` accepts
    connections with `envkit.transport.listener` (file descriptors in reserve, stalled request heads closed first)
    when the config is `server_config`'s with its `loop="auto"`; `await serve()` on a loop of one's own accepts as
    that loop does.
    """

    def __init__(self, config: uvicorn.Config, on_started: Callable[[int], None] | None = None) -> None:
        super().__init__(config)
        self.on_started = on_started

    def run(self, sockets: Any = None) -> None:
        limits = getattr(self.config.http, "limits", None)   # those of `server_config`'s protocol class
        if self.config.loop != "auto" or not isinstance(limits, HeadLimits):
            super().run(sockets)
            return
        with asyncio.Runner(loop_factory=guarded_loop_factory(limits.make_room)) as runner:
            runner.run(self.serve(sockets=sockets))

    @property
    def port(self) -> int:
        """The port the server listens on (after start-up)."""
        return self.servers[0].sockets[0].getsockname()[1]

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.on_started is not None and self.servers:
            self.on_started(self.port)

    async def shutdown(self, sockets: Any = None) -> None:
        pool = getattr(self.config.app.state, "envkit_pool", None)
        if pool is not None:
            await pool.shutdown()
        await super().shutdown(sockets)


class QuietWebSocketHandshakes(logging.Filter):
    """Drops uvicorn's INFO lines per WebSocket connection (`"WebSocket /ws" [accepted]`, `connection open`,
    `connection closed`, `connection rejected (...)`): several per session, thousands under load; refusals are
    counted in `/metrics` instead. `envkit serve --log-level debug` keeps them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg
        return not (isinstance(message, str) and (message.startswith(('%s - "WebSocket ', "connection rejected"))
                                                  or message in ("connection open", "connection closed")))


def run_server(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "info",
               on_started: Callable[[int], None] | None = None, compression: bool = False) -> None:
    """Serve `app` until SIGINT/SIGTERM; sessions are closed with 1001 before the server stops.

    Below `log_level="debug"`, the lines uvicorn logs for every WebSocket connection are dropped.
    """
    config = server_config(app, host, port, log_level=log_level, compression=compression)
    if log_level != "debug":
        logging.getLogger("uvicorn.error").addFilter(QuietWebSocketHandshakes())
    EnvkitServer(config, on_started).run()


@contextmanager
def running_server(app: FastAPI, *, startup_timeout: float = 20.0, **config: Any) -> Iterator[str]:
    """Serve `app` on 127.0.0.1 and a free port in a background thread; yields `http://127.0.0.1:PORT`.

    Leaving the block ends every session (close 1001) and stops the server. For embedding a server
    in a program (the trainer does) and for tests; `config` goes to uvicorn's `Config`.
    """
    server = EnvkitServer(server_config(app, "127.0.0.1", 0, **{"log_level": "warning", **config}))
    thread = threading.Thread(target=server.run, name="envkit-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the embedded server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
