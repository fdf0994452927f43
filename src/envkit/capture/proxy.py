"""`CaptureProxy`: the capture routes served on 127.0.0.1 and on unix sockets, from one event loop thread.

Each listener (the TCP port, each unix socket) is a uvicorn server on the proxy's own event loop, running in a
background thread; they share one app, so one set of sessions and one batcher. `add_listener` adds a unix socket
while the proxy runs (one per sandbox channel), `remove_listener` takes it away.
"""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

from .engine import Engine, Sampling
from .routes import CaptureRoutes
from .session import CaptureSession

__all__ = ["CaptureProxy"]

START_TIMEOUT_S = 30.0
#: The longest path a unix socket's address holds on Linux (`sun_path`, less its final NUL).
MAX_SOCKET_PATH = 107


class CaptureProxy:
    """An OpenAI-compatible endpoint that records every call it serves from `engine`.

    `port`: the 127.0.0.1 port (0: a free one; None: no TCP listener); `unix_socket`: a socket path to listen on
    as well (`add_listener` adds more, as it does to a proxy started with neither). `batch_window_s` and `max_batch`:
    how long a call waits for others to share its engine batch, and the largest batch. Use as a context manager, or
    `start()` and `close()`."""

    def __init__(self, engine: Engine, *, unix_socket: str | os.PathLike[str] | None = None,
                 port: int | None = 0, batch_window_s: float = 0.005, max_batch: int = 64) -> None:
        self.routes = CaptureRoutes(engine, batch_window_s=batch_window_s, max_batch=max_batch)
        self.engine = engine
        self.port = port
        self.unix_socket = unix_socket
        #: "http://127.0.0.1:PORT/v1" once started with a TCP listener.
        self.url: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: dict[str, tuple[Any, Any, Path | None]] = {}

    def start(self) -> CaptureProxy:
        if self._loop is not None:
            return self
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="envkit-capture", daemon=True)
        self._thread.start()
        try:
            if self.port is not None:
                listening = socket.create_server(("127.0.0.1", self.port))
                port = listening.getsockname()[1]
                self._serve(f"127.0.0.1:{port}", listening, None)
                self.url = f"http://127.0.0.1:{port}/v1"
            if self.unix_socket is not None:
                self.add_listener(self.unix_socket)
        except BaseException:
            self.close()
            raise
        return self

    def add_listener(self, unix_socket: str | os.PathLike[str]) -> str:
        """Listen on `unix_socket` too (a stale socket file there is replaced); returns its path."""
        if self._loop is None:
            raise RuntimeError("start the proxy before adding listeners")
        path = Path(unix_socket)
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise ValueError(f"the socket path {path} is longer than the {MAX_SOCKET_PATH} bytes a unix socket's "
                             "address holds; use a shorter folder")
        if path.exists() or path.is_symlink():
            if not stat.S_ISSOCK(path.lstat().st_mode):
                raise FileExistsError(f"{path} exists and is not a socket; pick another path for the listener")
            path.unlink()
        listening = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listening.bind(str(path))
        listening.listen(128)
        self._serve(str(path), listening, path)
        return str(path)

    def remove_listener(self, unix_socket: str | os.PathLike[str]) -> None:
        """Stop listening on `unix_socket` and remove the socket file."""
        self._stop(str(Path(unix_socket)))

    def _serve(self, name: str, listening: socket.socket, path: Path | None) -> None:
        import uvicorn

        assert self._loop is not None
        config = uvicorn.Config(self.routes.app, lifespan="off", log_level="warning", access_log=False,
                                timeout_keep_alive=30)
        server = uvicorn.Server(config)
        done = asyncio.run_coroutine_threadsafe(server.serve(sockets=[listening]), self._loop)
        self._servers[name] = (server, done, path)
        waited = 0.0
        while not server.started:
            if done.done():
                done.result()   # raises what stopped it
                raise RuntimeError(f"the capture proxy stopped while starting on {name}")
            if waited > START_TIMEOUT_S:
                raise TimeoutError(f"the capture proxy did not start on {name} in {START_TIMEOUT_S:.0f}s")
            threading.Event().wait(0.01)
            waited += 0.01

    def _stop(self, name: str) -> None:
        entry = self._servers.pop(name, None)
        if entry is None:
            return
        server, done, path = entry
        server.should_exit = True
        try:
            done.result(timeout=START_TIMEOUT_S)
        finally:
            if path is not None and path.exists():
                path.unlink()

    def open_session(self, max_calls: int = 32, sampling: Sampling | None = None) -> CaptureSession:
        """A new session with its own key, a budget of `max_calls` calls, and `sampling` (default `Sampling()`)."""
        session = CaptureSession(max_calls=max_calls, sampling=sampling or Sampling(), on_close=self.routes.remove)
        self.routes.add(session)
        return session

    def close(self) -> None:
        """Stop every listener, close the engine's connections (an engine with `aclose`), stop the event loop;
        sessions' records stay readable."""
        for name in list(self._servers):
            self._stop(name)
        if self._loop is not None:
            closing = getattr(self.engine, "aclose", None)
            if closing is not None and self._loop.is_running():
                asyncio.run_coroutine_threadsafe(closing(), self._loop).result(timeout=START_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=START_TIMEOUT_S)
            self._loop.close()
        self._loop = self._thread = None
        self.url = None

    def __enter__(self) -> CaptureProxy:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
