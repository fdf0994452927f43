"""Accepting connections with file descriptors in reserve: the event loop `envkit serve` runs uvicorn on.

uvloop (libuv) accepts every connection waiting in the listen queue at once, and when the process has no file
descriptor left (EMFILE) it frees one, accepts and closes until the queue is empty: every client waiting at that
moment is reset. An attacker holding half-sent handshakes past the descriptor limit and re-opening each one the
server closes keeps the server there, and locks every other client out.

Here the loop's `create_server` returns a `Listener`, which accepts by itself (`accept(2)`, then
`loop.connect_accepted_socket`), at most `BATCH` connections per wake-up, and keeps its connections below
`max_connections`: the process's descriptor limit (RLIMIT_NOFILE) less the descriptors open when it started
and a reserve (`descriptor_reserve`: an eighth of the limit, 64 to 1,024) for everything else the server opens,
and at least one.

- At `max_connections`, each further accept first closes the connection that has waited longest for its request
  head (`make_room`, 503), if it has waited a second (so a burst of clients connecting together is never turned
  away). When there is none, the listener stops accepting and looks again every `RETRY_S`: new clients wait in
  the kernel's listen queue, and get in as soon as a connection closes or a stalled head can be closed.
- If accepting fails for want of descriptors anyway (something else used up the reserve), it closes the oldest
  stalled head the same way and accepts again once that is gone. Nobody waiting is reset.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import logging
import os
import resource
import socket
from typing import Any, Callable

from ..core.quiet_log import RateLimitedLog

__all__ = ["Listener", "guarded_loop_factory", "descriptor_reserve", "BATCH", "RETRY_S"]

#: Connections accepted per wake-up of the listening socket, at most (then the loop runs its other callbacks).
BATCH = 32
#: Seconds between looks at the descriptors while crowded with nothing to close, or after an unexpected error.
RETRY_S = 0.1
#: accept(2) errors that mean the process or the system is out of descriptors or memory.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

logger = logging.getLogger("uvicorn.error")
_log = RateLimitedLog(logger)


def descriptor_reserve(limit: int) -> int:
    """Descriptors kept free of connections: an eighth of `limit`, between 2 × `BATCH` and 1,024."""
    return max(2 * BATCH, min(1024, limit // 8))


def open_descriptors() -> int:
    """How many file descriptors this process has open (Linux's /proc; elsewhere the lowest free one)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1   # less the one listing it
    except OSError:
        lowest_free = os.dup(0)
        os.close(lowest_free)
        return lowest_free


class Listener:
    """Accepts connections on listening `sockets` for `protocol_factory`, at most `max_connections` open at once
    (None: no limit); `make_room()` closes the oldest stalled connection (True) or finds none (False).

    It stands in for the `asyncio.Server` that `create_server` returns: `sockets`, `close()`, `wait_closed()`,
    `is_serving()`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sockets: list[socket.socket],
                 protocol_factory: Callable[[], asyncio.BaseProtocol], make_room: Callable[[], bool]) -> None:
        self.loop = loop
        self.sockets = sockets
        self.protocol_factory = protocol_factory
        self.make_room = make_room
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.limit = None if soft == resource.RLIM_INFINITY else soft
        self.max_connections = (None if self.limit is None
                                else max(1, self.limit - descriptor_reserve(self.limit) - open_descriptors()))
        #: The connections accepted, closed ones among them until `_room` drops them.
        self.connections: list[socket.socket] = []
        self._handing_over: set[asyncio.Task[None]] = set()   # connections on their way to the protocol
        self._retry: asyncio.TimerHandle | None = None
        self._serving = True
        for sock in sockets:
            sock.setblocking(False)
            loop.add_reader(sock.fileno(), self._accept, sock)

    def is_serving(self) -> bool:
        return self._serving

    def close(self) -> None:
        """Stop accepting and close the listening sockets; open connections are left to their protocols."""
        if not self._serving:
            return
        self._serving = False
        self._pause()
        for sock in self.sockets:
            sock.close()

    async def wait_closed(self) -> None:
        """Nothing to wait for: `close()` closes the listening sockets at once."""

    def _room(self) -> int | None:
        """How many more connections may be accepted now (None: any number). Closed connections are dropped from
        `connections` only when it reaches `max_connections`, so this costs a scan once per `max_connections`
        accepts, or once per wake-up while the server is full."""
        if self.max_connections is None:
            return None
        if len(self.connections) >= self.max_connections:
            self.connections = [conn for conn in self.connections if conn.fileno() != -1]
        return self.max_connections - len(self.connections)

    def _accept(self, sock: socket.socket) -> None:
        room = self._room()
        for _ in range(BATCH):
            if room is not None and room <= 0 and not self.make_room():
                _log.warning("full", "%d connections open, the most this server keeps (RLIMIT_NOFILE %d, less the "
                             "descriptors open at start and %d in reserve): new connections wait (raise `ulimit -n`)",
                             len(self.connections), self.limit, descriptor_reserve(self.limit or 0))
                self._pause(RETRY_S)
                return
            try:
                conn, _ = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except ConnectionAbortedError:   # the client left before it was accepted
                continue
            except OSError as error:
                self._accept_failed(error)
                return
            if room is not None:
                room -= 1
                self.connections.append(conn)
            task = self.loop.create_task(self._hand_over(conn))
            self._handing_over.add(task)
            task.add_done_callback(self._handing_over.discard)

    def _accept_failed(self, error: OSError) -> None:
        if error.errno in _OUT_OF_RESOURCES:
            _log.warning("accept", "accepting a connection failed (%s): closing stalled request heads, and the "
                         "waiting connections wait on (raise `ulimit -n`)", error)
            self._pause(0.0 if self.make_room() else RETRY_S)   # the closed head's descriptor is free by then
        else:
            _log.warning("accept", "accepting a connection failed: %s", error)
            self._pause(RETRY_S)

    async def _hand_over(self, conn: socket.socket) -> None:
        try:
            await self.loop.connect_accepted_socket(self.protocol_factory, conn)
        except OSError as error:   # the connection broke before its protocol got it
            logger.debug("a connection closed before it was served: %s", error)
            conn.close()

    def _pause(self, resume_after_s: float | None = None) -> None:
        """Stop watching the listening sockets; watch them again after `resume_after_s` (None: never)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        for sock in self.sockets:
            self.loop.remove_reader(sock.fileno())
        if resume_after_s is not None:
            self._retry = self.loop.call_later(resume_after_s, self._resume)

    def _resume(self) -> None:
        self._retry = None
        for sock in self.sockets:
            self.loop.add_reader(sock.fileno(), self._accept, sock)


def _listening_sockets(host: str | None, port: int, backlog: int) -> list[socket.socket]:
    """A listening socket for each address `host` resolves to (IPv6 ones IPv6 only), as `create_server` binds."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    try:
        for family, address in dict.fromkeys((info[0], info[4][:2]) for info in infos):
            sockets.append(socket.create_server(address, family=family, backlog=backlog))
    except OSError:
        for sock in sockets:
            sock.close()
        raise
    return sockets


class _GuardedAccept:
    """Event loop mixin: TCP servers made by `create_server` accept through a `Listener`."""

    make_room: Callable[[], bool]

    async def create_server(self, protocol_factory: Callable[[], asyncio.BaseProtocol], host: str | None = None,
                            port: int | None = None, *, sock: socket.socket | None = None, backlog: int = 100,
                            ssl: Any = None, **options: Any) -> Any:
        if ssl is not None or options or (sock is not None and sock.family not in (socket.AF_INET, socket.AF_INET6)):
            return await super().create_server(  # type: ignore[misc]
                protocol_factory, host, port, sock=sock, backlog=backlog, ssl=ssl, **options)
        if sock is not None:
            sock.listen(backlog)
            sockets = [sock]
        else:
            sockets = _listening_sockets(host, port or 0, backlog)
        return Listener(self, sockets, protocol_factory, self.make_room)  # type: ignore[arg-type]


def _base_loop() -> type[asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.SelectorEventLoop
    return uvloop.Loop


@functools.cache
def _guarded_loop_class(base: type[asyncio.AbstractEventLoop]) -> type[asyncio.AbstractEventLoop]:
    return type(f"Guarded{base.__name__}", (_GuardedAccept, base), {})


def _new_loop(make_room: Callable[[], bool]) -> asyncio.AbstractEventLoop:
    loop = _guarded_loop_class(_base_loop())()
    loop.make_room = make_room  # type: ignore[attr-defined]
    return loop


def guarded_loop_factory(make_room: Callable[[], bool]) -> Callable[[], asyncio.AbstractEventLoop]:
    """An event loop factory (for `asyncio.Runner`): uvloop's loop (asyncio's without it) whose TCP servers
    accept through a `Listener` that calls `make_room` to close a stalled connection when descriptors run short."""
    return functools.partial(_new_loop, make_room)
