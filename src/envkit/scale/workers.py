"""`envkit serve TARGET --workers N`: N server processes behind one port, each on a core of its own.

How the port is shared: every worker listens on a socket of its own bound to the same address
with `SO_REUSEPORT`, and the kernel hands each new connection to one of them by a hash of its
addresses: an even spread however the connections arrive. A single socket inherited by every
worker (what gunicorn and `uvicorn --workers` do) was tried first and spreads badly: a burst of
connections lands on whichever worker wakes first, because an event loop accepts every pending
connection at once, before it knows how many sessions it holds; a CPU-heavy environment then runs
on one core while the other idles. The supervisor keeps the address bound (not listening) for the
workers' lifetime, so the port stays reserved while a worker restarts. Nothing proxies frames: a
client's socket belongs to the worker that accepted it for its whole life.

How the workers know each other's load: a small block of shared memory (`WorkerBoard`) holds one
row per worker (pid, sessions, restarts, ready), written by its worker and read by all. So
`/health`, whichever worker answers, tells the whole (sessions and limit summed) and each worker.
Each worker's share of `max_concurrent_envs` is what the even spread gives it; the limit itself
is the whole's: a worker admits a session while the workers together hold fewer than
`max_concurrent_envs` (one lock, taken per session opened or closed), so a client is never
refused while any worker has room, and never admitted past the limit.

A worker that dies is forked again into its row; only its own sessions are lost (their clients
get `SessionLostError`, and connections it had not yet accepted are reset). SIGINT or SIGTERM to
the supervisor stops every worker the way a single server stops: each session is closed with
1001 and its environment closed. A supervisor that dies without stopping them (SIGKILL, the OOM
killer) takes them with it: each worker is sent SIGTERM when it does (Linux's parent-death signal;
elsewhere a worker looks for its parent once a second), so no worker is left holding the port.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any, Callable

import uvicorn

from ..transport.uvicorn_server import EnvkitServer, server_config

__all__ = ["WorkerBoard", "serve_workers", "worker_shares"]

logger = logging.getLogger("envkit.workers")

#: A worker that dies sooner than this after starting is restarted only after a growing pause.
QUICK_DEATH_S = 2.0
MAX_RESTART_PAUSE_S = 10.0
#: A lock on the shared session count held this long belonged to a worker that died holding it (seconds).
LOCK_STUCK_S = 0.5
#: Seconds to wait for workers to close their sessions on shutdown before killing them.
STOP_TIMEOUT_S = 20.0
#: Linux's `prctl` option that has the kernel signal a process when its parent exits.
_PR_SET_PDEATHSIG = 1

_FIELDS = ("pid", "active", "restarts", "ready")


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

    def ended(self, index: int) -> None:
        """Row `index`'s worker is gone: its sessions no longer count.

        A worker killed inside its few-microsecond hold of the lock leaves it taken: a lock still
        taken after `LOCK_STUCK_S` is released here, so the other workers do not wait forever.
        """
        if not self._lock.acquire(timeout=LOCK_STUCK_S):
            logger.warning("the session count's lock was held by the dead worker %d; releasing it", index)
            self._lock.release()
            self._lock.acquire()
        try:
            for name in ("pid", "active", "ready"):
                self.set(index, name, 0)
        finally:
            self._lock.release()

    def rows(self) -> list[dict[str, Any]]:
        """Every worker's row, for `/health`."""
        return [{"worker": index, "pid": self.get(index, "pid") or None,
                 "status": "ready" if self.get(index, "ready") else "starting",
                 "active_sessions": self.get(index, "active"), "share": self.shares[index],
                 "restarts": self.get(index, "restarts")}
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
    """Worker `index`'s side of the shared session limit (`SessionPool.shared_limit`)."""

    board: WorkerBoard
    index: int

    def try_reserve(self) -> bool:
        return self.board.try_reserve(self.index)

    def release(self) -> None:
        self.board.release(self.index)

    def in_use(self) -> int:
        return self.board.total_active()


class WorkerServer(EnvkitServer):
    """An envkit uvicorn server on a worker's own `SO_REUSEPORT` socket, marking itself ready on the board."""

    def __init__(self, config: uvicorn.Config, board: WorkerBoard, index: int) -> None:
        super().__init__(config)
        self.board = board
        self.index = index

    async def startup(self, sockets: Any = None) -> None:
        await super().startup([reuse_port_socket(self.config.host, self.config.port, listen=True)])
        self.board.set(self.index, "ready", 1)

    async def shutdown(self, sockets: Any = None) -> None:
        self.board.set(self.index, "ready", 0)
        await super().shutdown(sockets)


def _run_worker(index: int, board: WorkerBoard, listener: socket.socket, make_app: Callable[[], Any],
                log_level: str, supervisor_pid: int) -> None:
    """A worker process's body: its own app, session pool and listening socket, counted on the board."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _stop_with(supervisor_pid)
    host, port = listener.getsockname()[:2]
    listener.close()   # the supervisor's: it only holds the address
    app = make_app()
    app.state.envkit_pool.shared_limit = _WorkerLimit(board, index)
    app.documents.health_views.append(board.health_view(index))
    WorkerServer(server_config(app, host, port, log_level=log_level), board, index).run()


def _stop_with(supervisor_pid: int) -> None:
    """SIGTERM to this worker (uvicorn's graceful stop) once the supervisor is gone, however it went."""
    prctl = getattr(ctypes.CDLL(None), "prctl", None)
    if prctl is not None and prctl(_PR_SET_PDEATHSIG, signal.SIGTERM) == 0:
        if os.getppid() != supervisor_pid:   # it died before the request was made
            os.kill(os.getpid(), signal.SIGTERM)
        return

    def watch_parent() -> None:
        while os.getppid() == supervisor_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch_parent, name="envkit-supervisor-watch", daemon=True).start()


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
                                  args=(index, self.board, self.listener, self.make_app, self.log_level, os.getpid()))
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


def reuse_port_socket(host: str, port: int, *, listen: bool) -> socket.socket:
    """A socket bound to `host:port` with `SO_REUSEPORT` (listening when `listen`). Raises `OSError` when taken."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        if listen:
            sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def serve_workers(make_app: Callable[[], Any], host: str, port: int, workers: int, *, log_level: str = "info",
                  on_started: Callable[[int, WorkerBoard], None] | None = None, startup_timeout: float = 120.0) -> int:
    """Serve `make_app()` from `workers` processes on one port until SIGINT/SIGTERM; returns an exit code.

    `make_app` is called once in each worker (after the fork) and must build an envkit app; its
    `max_concurrent_envs` is the whole's limit. `on_started(port, board)` is called once every worker is ready.
    """
    probe = make_app()   # fail here, once, on a setting that cannot work: not N times in the workers
    board = WorkerBoard(workers, probe.state.envkit_pool.max_sessions)
    del probe
    listener = reuse_port_socket(host, port, listen=False)   # holds the address, and picks the port for 0
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
