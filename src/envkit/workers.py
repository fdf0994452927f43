"""`envkit serve TARGET --workers N`: N server processes behind one port, each on a core of its own.

How the port is shared: the supervisor binds the listening socket once and forks the workers,
which inherit it and all accept from its one queue (what gunicorn and `uvicorn --workers` do).
Chosen over `SO_REUSEPORT`, where each worker would bind a socket of its own: there the kernel
hashes each connection to one worker's queue whatever that worker's load, and a worker that dies
takes the connections waiting in its queue with it (they are reset). With one shared queue a
connection waits for whichever worker accepts first, a dead worker loses nothing that it had not
accepted, and the port stays bound while a worker restarts. Nothing proxies frames: a client's
socket belongs to the worker that accepted it for its whole life.

How the workers know each other's load: a small block of shared memory (`WorkerBoard`) holds one
row per worker (pid, sessions, restarts, whether it is ready and accepting), written by its worker
and read by all. So `/health`, whichever worker answers, tells the whole (sessions and limit
summed) and each worker; and the session limit is the whole's: a worker admits a session while
the workers together hold fewer than `max_concurrent_envs` (one lock, taken per session opened
or closed), so a client is never refused while any worker has room.

How sessions spread: each worker has its share (`max_concurrent_envs / N`, rounded up). A worker
that holds its share stops accepting while another worker is below its own, so the kernel hands
new connections to the others; when every worker holds its share, all accept again (and refuse
with a clear capacity error once the whole is full).

A worker that dies is forked again into its row; only its own sessions are lost (their clients
get `SessionLostError`). SIGINT or SIGTERM to the supervisor stops every worker the way a single
server stops: each session is closed with 1001 and its environment closed.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import multiprocessing
import os
import signal
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

import uvicorn

from .server import EnvkitServer, server_config

__all__ = ["WorkerBoard", "serve_workers", "worker_shares"]

logger = logging.getLogger("envkit.workers")

#: How often a worker checks whether it should accept connections (seconds).
ACCEPT_CHECK_S = 0.05
#: A worker that dies sooner than this after starting is restarted only after a growing pause.
QUICK_DEATH_S = 2.0
MAX_RESTART_PAUSE_S = 10.0
#: Seconds to wait for workers to close their sessions on shutdown before killing them.
STOP_TIMEOUT_S = 20.0

_FIELDS = ("pid", "active", "restarts", "ready", "accepting", "started_ms")


def worker_shares(total: int, workers: int) -> list[int]:
    """Each worker's share of `total` sessions: as even as can be, summing to `total`."""
    base, extra = divmod(total, workers)
    return [base + (index < extra) for index in range(workers)]


class WorkerBoard:
    """Shared memory with one row per worker, and the lock that guards the session count.

    Made by the supervisor before forking; every worker writes its own row and reads all rows.
    """

    def __init__(self, workers: int, max_sessions: int) -> None:
        context = multiprocessing.get_context("fork")
        self.workers = workers
        self.max_sessions = max_sessions
        self.shares = worker_shares(max_sessions, workers)
        self._lock = context.Lock()
        self._cells = context.RawArray(ctypes.c_int64, workers * len(_FIELDS))

    def get(self, index: int, name: str) -> int:
        return self._cells[index * len(_FIELDS) + _FIELDS.index(name)]

    def set(self, index: int, name: str, value: int) -> None:
        self._cells[index * len(_FIELDS) + _FIELDS.index(name)] = value

    def total_active(self) -> int:
        return sum(self.get(index, "active") for index in range(self.workers))

    def try_reserve(self, index: int) -> bool:
        """Count a new session on worker `index` if the workers together are below the limit."""
        with self._lock:
            if self.total_active() >= self.max_sessions:
                return False
            self.set(index, "active", self.get(index, "active") + 1)
            return True

    def release(self, index: int) -> None:
        with self._lock:
            self.set(index, "active", max(0, self.get(index, "active") - 1))

    def started(self, index: int, pid: int) -> None:
        """A worker process was started in row `index` (the supervisor's call)."""
        with self._lock:
            self.set(index, "pid", pid)
            self.set(index, "active", 0)
            self.set(index, "ready", 0)
            self.set(index, "accepting", 0)
            self.set(index, "started_ms", int(time.time() * 1000))

    def ended(self, index: int) -> None:
        """Row `index`'s worker is gone: its sessions no longer count."""
        with self._lock:
            for name in ("pid", "active", "ready", "accepting"):
                self.set(index, name, 0)

    def should_accept(self, index: int) -> bool:
        """Below its share, or every other ready worker is at or above its own: accept new connections."""
        if self.get(index, "active") < self.shares[index]:
            return True
        return not any(self.get(other, "ready") and self.get(other, "active") < self.shares[other]
                       for other in range(self.workers) if other != index)

    def rows(self) -> list[dict[str, Any]]:
        """Every worker's row, for `/health`."""
        return [{"worker": index, "pid": self.get(index, "pid") or None,
                 "status": "ready" if self.get(index, "ready") else "starting",
                 "active_sessions": self.get(index, "active"), "share": self.shares[index],
                 "accepting": bool(self.get(index, "accepting")), "restarts": self.get(index, "restarts")}
                for index in range(self.workers)]

    def health_view(self, index: int) -> Callable[[dict[str, Any]], None]:
        """Amends worker `index`'s `/health`: the whole's sessions and limit, this worker, and every worker."""

        def amend(document: dict[str, Any]) -> None:
            document["active_sessions"] = self.total_active()
            document["max_sessions"] = self.max_sessions
            document["worker"] = index
            document["workers"] = self.rows()

        return amend


@dataclass
class _WorkerLimit:
    """Worker `index`'s side of the shared session limit (`SessionPool.shared_limit`).

    `changed` runs after each session this worker opens or closes (the accept gate's check).
    """

    board: WorkerBoard
    index: int
    changed: Callable[[], None] = lambda: None

    def try_reserve(self) -> bool:
        taken = self.board.try_reserve(self.index)
        if taken:
            self.changed()
        return taken

    def release(self) -> None:
        self.board.release(self.index)
        self.changed()

    def in_use(self) -> int:
        return self.board.total_active()


class WorkerServer(EnvkitServer):
    """An envkit uvicorn server accepting from an inherited listening socket, pausing when it holds its share.

    It listens on duplicates of the shared socket's descriptor: closing one to pause closes only
    this process's duplicate, and the others keep accepting from the same queue.
    """

    def __init__(self, config: uvicorn.Config, board: WorkerBoard, index: int, listener: socket.socket) -> None:
        super().__init__(config)
        self.board = board
        self.index = index
        self.listener = listener
        self._watch: asyncio.Task[None] | None = None
        self._reopening: asyncio.Task[None] | None = None

    def _duplicate(self) -> socket.socket:
        return socket.socket(fileno=os.dup(self.listener.fileno()))

    async def startup(self, sockets: Any = None) -> None:
        await super().startup([self._duplicate()])
        self.board.set(self.index, "accepting", 1)
        self.board.set(self.index, "ready", 1)
        self._watch = asyncio.get_running_loop().create_task(self._watch_others(), name="envkit-accept-gate")

    def gate(self) -> None:
        """Stop accepting at once when this worker should not; reopen (soon) when it should."""
        if self.should_exit or not self.board.get(self.index, "ready"):
            return
        accept = self.board.should_accept(self.index)
        if not accept and self.servers:
            servers, self.servers = self.servers, []
            for server in servers:
                server.close()
            self.board.set(self.index, "accepting", 0)
        elif accept and not self.servers and self._reopening is None:
            self._reopening = asyncio.get_running_loop().create_task(self._reopen())

    async def _reopen(self) -> None:
        config = self.config
        protocol = functools.partial(config.http_protocol_class, config=config, server_state=self.server_state,
                                     app_state=self.lifespan.state)
        try:
            server = await asyncio.get_running_loop().create_server(protocol, sock=self._duplicate(),
                                                                    backlog=config.backlog)
        finally:
            self._reopening = None
        if self.should_exit:
            server.close()
            return
        self.servers = [server]
        self.board.set(self.index, "accepting", 1)
        self.gate()   # the load may have changed while reopening

    async def _watch_others(self) -> None:
        """Follow the other workers' loads: a worker below its share makes this one stop accepting, and back."""
        while not self.should_exit:
            await asyncio.sleep(ACCEPT_CHECK_S)
            self.gate()

    async def shutdown(self, sockets: Any = None) -> None:
        for task in (self._watch, self._reopening):
            if task is not None:
                task.cancel()
        self.board.set(self.index, "ready", 0)
        self.board.set(self.index, "accepting", 0)
        await super().shutdown(sockets)


def _run_worker(index: int, board: WorkerBoard, listener: socket.socket, make_app: Callable[[], Any],
                log_level: str) -> None:
    """A worker process's body: its own app and session pool, counted on the board."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    app = make_app()
    limit = _WorkerLimit(board, index)
    app.state.envkit_pool.shared_limit = limit
    app.documents.health_views.append(board.health_view(index))
    host, port = listener.getsockname()[:2]
    server = WorkerServer(server_config(app, host, port, log_level=log_level), board, index, listener)
    limit.changed = server.gate
    server.run()


class _Supervisor:
    def __init__(self, workers: int, board: WorkerBoard, listener: socket.socket, make_app: Callable[[], Any],
                 log_level: str) -> None:
        self.board = board
        self.listener = listener
        self.make_app = make_app
        self.log_level = log_level
        self.processes: list[multiprocessing.process.BaseProcess | None] = [None] * workers
        self.started_at = [0.0] * workers
        self.quick_deaths = [0] * workers
        self.restart_due: dict[int, float] = {}
        self.stopping = False

    def start(self, index: int) -> None:
        context = multiprocessing.get_context("fork")
        process = context.Process(target=_run_worker, name=f"envkit-worker-{index}", daemon=False,
                                  args=(index, self.board, self.listener, self.make_app, self.log_level))
        process.start()
        assert process.pid is not None
        self.board.started(index, process.pid)
        self.processes[index] = process
        self.started_at[index] = time.monotonic()

    def wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.stopping:
            if all(self.board.get(index, "ready") for index in range(len(self.processes))):
                return True
            if any(process is not None and not process.is_alive() for process in self.processes):
                return False
            time.sleep(0.05)
        return False

    def watch(self) -> None:
        """Restart workers that die, until asked to stop."""
        while not self.stopping:
            sentinels = {process.sentinel: index for index, process in enumerate(self.processes) if process is not None}
            pause = min([due - time.monotonic() for due in self.restart_due.values()] + [1.0])
            for sentinel in wait(list(sentinels), timeout=max(pause, 0.0)):
                if not self.stopping:
                    self._worker_died(sentinels[sentinel])
            now = time.monotonic()
            for index, due in list(self.restart_due.items()):
                if due <= now and not self.stopping:
                    del self.restart_due[index]
                    self.start(index)

    def _worker_died(self, index: int) -> None:
        process = self.processes[index]
        assert process is not None
        process.join()
        self.processes[index] = None
        lost = self.board.get(index, "active")
        self.board.ended(index)
        self.board.set(index, "restarts", self.board.get(index, "restarts") + 1)
        code = process.exitcode or 0
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        quick = time.monotonic() - self.started_at[index] < QUICK_DEATH_S
        self.quick_deaths[index] = self.quick_deaths[index] + 1 if quick else 0
        pause = min(MAX_RESTART_PAUSE_S, 0.5 * 2 ** self.quick_deaths[index]) if quick else 0.0
        logger.warning("worker %d (pid %s) ended with %s; its %d session(s) are lost; restarting it%s", index,
                       process.pid, how, lost, f" in {pause:g}s" if pause else "")
        self.restart_due[index] = time.monotonic() + pause

    def stop(self) -> None:
        """SIGTERM every worker (each closes its sessions with 1001), then SIGKILL those still running."""
        self.stopping = True
        alive = [process for process in self.processes if process is not None and process.is_alive()]
        for process in alive:
            os.kill(process.pid, signal.SIGTERM)  # type: ignore[arg-type]
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in alive:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                logger.warning("worker pid %s did not stop within %gs; killing it", process.pid, STOP_TIMEOUT_S)
                process.kill()
                process.join()


def bind_listener(host: str, port: int) -> socket.socket:
    """The one listening socket the workers share. Raises `OSError` when the address is taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family, backlog=2048)


def serve_workers(make_app: Callable[[], Any], host: str, port: int, workers: int, *, log_level: str = "info",
                  on_started: Callable[[int, WorkerBoard], None] | None = None, startup_timeout: float = 120.0) -> int:
    """Serve `make_app()` from `workers` processes on one port until SIGINT/SIGTERM; returns an exit code.

    `make_app` is called once in each worker (after the fork) and must build an envkit app; its
    `max_concurrent_envs` is the whole's limit. `on_started(port, board)` is called once every worker is ready.
    """
    probe = make_app()   # fail here, once, on a setting that cannot work: not N times in the workers
    board = WorkerBoard(workers, probe.state.envkit_pool.max_sessions)
    del probe
    listener = bind_listener(host, port)
    supervisor = _Supervisor(workers, board, listener, make_app, log_level)

    def stop_on_signal(signum: int, frame: Any) -> None:
        supervisor.stopping = True

    previous = {sig: signal.signal(sig, stop_on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for index in range(workers):
            supervisor.start(index)
        if not supervisor.wait_ready(startup_timeout):
            if supervisor.stopping:
                return 0
            logger.error("the workers did not all start within %gs", startup_timeout)
            return 1
        if on_started is not None:
            on_started(listener.getsockname()[1], board)
        supervisor.watch()
        return 0
    finally:
        supervisor.stop()
        listener.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
