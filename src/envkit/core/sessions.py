"""Sessions: one environment per connection, a capacity limit, idle reaping and shutdown.

`SessionPool` owns the count of open sessions and one sweep over them that reaps idle sessions.
`Session` drives one
environment instance, calling it on the event loop (`RUN_INLINE` environments and `*_async`
overrides) or on a bounded shared thread pool, so slow synchronous code never stalls other
sessions and the number of threads never grows with the number of sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import secrets
import time
from collections import OrderedDict, deque
from contextvars import ContextVar
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Awaitable, Callable, Coroutine, Iterator, Protocol

from pydantic import BaseModel

from ..environment import Action, Environment, Observation
from ..errors import EnvironmentLostError
from ..protocol import CloseCode
from ..tools import ToolSpec
from .memory import release_memory
from .metrics import ServerMetrics

logger = logging.getLogger("envkit.server")

__all__ = ["Session", "SessionPool", "SharedLimit", "new_session_id"]

class SharedLimit(Protocol):
    """A session limit that several processes count against together."""

    def try_reserve(self) -> bool: ...

    def release(self) -> None: ...

    def in_use(self) -> int:
        """Sessions open in all the processes together."""


Closer = Callable[[int, str], Awaitable[None]]


#: The client address of the HTTP request being served, set by the app's access guard when sessions per client
#: are limited; HTTP surfaces' sessions (`ServedEnv.open_detached`) are counted against it.
current_client: ContextVar[str | None] = ContextVar("envkit_current_client", default=None)


def _give_up(waiter: asyncio.Future[bool]) -> None:
    """A slot wait's time is up: no slot (unless one was handed over already)."""
    if not waiter.done():
        waiter.set_result(False)


def _close_text(text: str) -> str:
    """`text` cut to what a WebSocket close frame carries (123 bytes of UTF-8)."""
    data = text.encode()
    return text if len(data) <= 123 else data[:120].decode(errors="ignore") + "..."


def new_session_id() -> str:
    """An unguessable session id: 32 hex digits."""
    return secrets.token_hex(16)


class Session:
    """One environment instance, with the bookkeeping the pool needs to reap or close it.

    A WebSocket session lives as long as its connection and is given `close_socket`; a detached
    session (HTTP surfaces such as MCP or the Open Reward Standard, where an episode spans many
    requests) has none, and gives its slot back itself when it ends (`owns_slot`). A socket attached to a
    detached session (`/ws?session_id=...`) sets `close_socket` while it is attached, so that reaping and
    shutdown close it with their code.
    """

    def __init__(self, pool: SessionPool, env: Environment, close_socket: Closer | None,
                 session_id: str | None = None, owns_slot: bool = False, client: str | None = None) -> None:
        self.id = session_id or new_session_id()
        #: The client address counted for this session in the pool's per-client limit; `end()` gives it back.
        self.client = client
        self.env = env
        self.pool = pool
        self.close_socket = close_socket
        #: `end()` gives the pool slot back (detached sessions); else whoever opened the session does.
        self.owns_slot = owns_slot
        self._turns: _Turns | None = None
        self.last_active = time.monotonic()
        self.busy = False
        self.has_reset = False
        self.ended: tuple[int, str] | None = None
        self._closed: asyncio.Future[None] | None = None
        env_class = type(env)
        self._inline = env_class.RUN_INLINE
        self._allows_step_before_reset = env_class.ALLOWS_STEP_BEFORE_RESET
        self._async_reset = env_class.reset_async is not Environment.reset_async
        self._async_step = env_class.step_async is not Environment.step_async

    @property
    def may_step(self) -> bool:
        """Whether steps and tool calls may run now: after a reset, or always where the environment allows it."""
        return self.has_reset or self._allows_step_before_reset

    async def run(self, function: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        """Call environment code where it belongs: on the loop if inline or a coroutine function, else on a worker.

        `function` is positional-only, so that every keyword (an argument named `function` too) reaches it.
        """
        try:
            if self._inline or inspect.iscoroutinefunction(function):   # an `async def` tool runs on the loop
                result = function(*args, **kwargs)
            else:
                result = await self.pool.run_in_worker(partial(function, *args, **kwargs))
            if not isinstance(result, BaseModel) and inspect.isawaitable(result):  # a model: skip the slower ABC check
                result = await result
        except EnvironmentLostError as error:
            await self.lost(error)
            raise
        return result

    async def lost(self, error: EnvironmentLostError) -> None:
        """The environment said what it holds is gone: end the session, so that no later call reaches it."""
        logger.warning("session %s ended: its environment was lost (%s)", self.id, error)
        await self.end(CloseCode.ENVIRONMENT_LOST, _close_text(f"environment lost: {error}"))

    async def reset(self, kwargs: dict[str, Any]) -> Observation:
        if self._async_reset:
            observation = await self._lost_guard(self.env.reset_async(**kwargs))
        else:
            observation = await self.run(self.env.reset, **kwargs)
        self.has_reset = True
        return observation

    async def step(self, action: Action) -> Observation:
        if self._async_step:
            return await self._lost_guard(self.env.step_async(action))
        if self._inline:   # `run`'s work without its frame: the step path of inline environments
            result = self.env.step(action)
            return result if isinstance(result, BaseModel) or not inspect.isawaitable(result) else await result
        return await self.run(self.env.step, action)

    async def _lost_guard(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except EnvironmentLostError as error:
            await self.lost(error)
            raise

    async def state(self) -> Any:
        return await self.run(getattr, self.env, "state")

    def call_tool(self, spec: ToolSpec, arguments: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        """Run tool `spec` with checked `arguments` (await the result)."""
        return self.run(getattr(self.env, spec.name), **arguments)

    def in_use(self) -> _Turns:
        """Serve one request of a detached session (`async with session.in_use():`): requests run one at a time,
        in the order they came, and the reaper sees the session busy."""
        if self._turns is None:
            self._turns = _Turns(self)
        return self._turns

    async def end(self, code: int, reason: str) -> None:
        """Close the socket with `code` (if still open) and the environment.

        Idempotent: a later call returns once the first has finished, so whoever gives back the
        session's slot after `end()` does so only when the environment has closed.
        """
        if self.ended is not None:
            if self._closed is not None:
                await asyncio.shield(self._closed)
            return
        self.ended = (code, reason)
        self._closed = closed = asyncio.get_running_loop().create_future()
        pool = self.pool
        pool.forget(self)
        pool.metrics.session_closed(code)
        pool.closing += 1
        try:
            if self.close_socket is not None:
                await self.close_socket(code, reason)
        except Exception:  # the socket may already be gone; the environment must still close
            logger.debug("closing socket of session %s failed", self.id, exc_info=True)
        try:
            await self.run(self.env.close)
        except Exception:
            logger.exception("environment close() failed in session %s", self.id)
        finally:
            pool.closing -= 1
            if self.client is not None:
                pool.drop_client(self.client)
            if self.owns_slot:
                pool.release()
            closed.set_result(None)


class _Ready:
    """An awaitable that is done at once (for an async context manager that need not wait)."""

    __slots__ = ()

    def __await__(self) -> Iterator[None]:
        return iter(())


_READY = _Ready()


class _Turns:
    """`Session.in_use()`: a detached session's requests one at a time, in the order they came, the session busy
    meanwhile. It keeps `asyncio.Lock`'s contract (first come, first served; a request cancelled while it waits
    leaves no trace, and one cancelled as its turn came passes the turn on), and takes a request that finds the
    session free, as nearly every one does, without creating a coroutine."""

    __slots__ = ("session", "held", "waiting")

    def __init__(self, session: Session) -> None:
        self.session = session
        self.held = False
        self.waiting: deque[asyncio.Future[None]] = deque()

    def __aenter__(self) -> Awaitable[None]:
        if self.held or self.waiting:
            return self._wait_turn()
        self.held = True
        self.session.busy = True
        return _READY

    def __aexit__(self, *exc_info: object) -> Awaitable[None]:
        session = self.session
        session.busy = False
        session.last_active = time.monotonic()
        self._pass_on()
        return _READY

    async def _wait_turn(self) -> None:
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(turn)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():   # the turn came as this request was cancelled: pass it on
                self._pass_on()
            else:
                with contextlib.suppress(ValueError):
                    self.waiting.remove(turn)
            raise
        self.session.busy = True

    def _pass_on(self) -> None:
        """Hand the session to the longest-waiting request, or free it."""
        while self.waiting:
            turn = self.waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self.held = False


class SessionPool:
    """Counts sessions against a limit, reaps idle ones and closes all of them at shutdown.

    Idle reaping is one sweep over all sessions rather than a timer per connection.

    When the last session of a burst closes and no other opens for `RECLAIM_AFTER_S`, the
    memory the burst used is given back to the OS (`release_memory`).
    """

    RECLAIM_AFTER_S = 1.0
    #: How many ended sessions `ended()` remembers, so a late request hears "gone" and why, not "unknown".
    REMEMBER_ENDED = 65536
    #: Sessions that must have closed since the last reclaim before another is worth its pause (tens of ms).
    RECLAIM_MIN_CLOSED = 64

    def __init__(self, max_sessions: int, idle_timeout_s: float | None, max_workers: int | None = None,
                 capacity_wait_s: float = 0.0, ping_interval_s: float | None = 20.0,
                 ping_timeout_s: float = 20.0, metrics: ServerMetrics | None = None,
                 max_sessions_per_client: int | None = None) -> None:
        self.max_sessions = max_sessions
        #: The server's counters (`GET /metrics`): sessions opened and closed here, frames and refusals by the transports.
        self.metrics = metrics or ServerMetrics()
        #: Sessions one client address may hold at once across every surface (None: no limit).
        self.max_sessions_per_client = max_sessions_per_client
        self._per_client: dict[str, int] = {}
        self.idle_timeout_s = idle_timeout_s
        self.capacity_wait_s = capacity_wait_s
        #: Keepalive, applied by the server (`envkit.transport.uvicorn_server`): ping a client every
        #: `ping_interval_s` (None: never) and end its session when no pong comes within `ping_timeout_s`, so a
        #: vanished client frees its slot.
        self.ping_interval_s = ping_interval_s
        self.ping_timeout_s = ping_timeout_s
        self._reserved = 0
        #: Sessions ending right now (socket closing, environment closing): their slots come back soon.
        self.closing = 0
        self._slot_waiters: deque[asyncio.Future[bool]] = deque()
        self._sessions: dict[str, Session] = {}
        #: A limit shared with other processes serving the same port (`envkit.scale.workers`): a slot is taken
        #: there too, and given back there when released. None for a server of its own.
        self.shared_limit: SharedLimit | None = None
        self._ended: OrderedDict[str, tuple[int, str]] = OrderedDict()
        self._executor = ThreadPoolExecutor(max_workers=max_workers or min(32, max(4, max_sessions)),
                                            thread_name_prefix="envkit-env")
        self._sweeper: asyncio.Task[None] | None = None
        self._ending: set[asyncio.Task[None]] = set()   # sessions the sweep is ending
        self._closed_since_reclaim = 0
        self._reclaim: asyncio.TimerHandle | None = None
        self.shutting_down = False

    @property
    def active(self) -> int:
        """Sessions open or being opened right now."""
        return self._reserved

    @property
    def active_everywhere(self) -> int:
        """Sessions open here and in the processes sharing the limit (`shared_limit`): what the limit counts."""
        return self.shared_limit.in_use() if self.shared_limit is not None else self._reserved

    def try_reserve(self) -> bool:
        """Take a slot for a new connection; False at capacity or during shutdown."""
        if self.shutting_down or self._reserved >= self.max_sessions:
            return False
        if self.shared_limit is not None and not self.shared_limit.try_reserve():
            return False
        self._reserved += 1
        return True

    def hold_client(self, client: str) -> bool:
        """Count one more session (open or opening) for `client`; False when it already holds its limit.

        Every surface that opens sessions calls this before `try_reserve`, and `drop_client` once the session
        is over, so that one address cannot take every slot.
        """
        limit = self.max_sessions_per_client
        held = self._per_client.get(client, 0)
        if limit is not None and held >= limit:
            return False
        self._per_client[client] = held + 1
        return True

    def drop_client(self, client: str) -> None:
        """Give back what `hold_client` counted."""
        held = self._per_client.get(client, 0) - 1
        if held > 0:
            self._per_client[client] = held
        else:
            self._per_client.pop(client, None)

    def sessions_of(self, client: str) -> int:
        """Sessions `client` holds right now."""
        return self._per_client.get(client, 0)

    @property
    def waiting_for_slots(self) -> int:
        """Connections waiting in `wait_for_slot`."""
        return len(self._slot_waiters)

    async def wait_for_slot(self) -> bool:
        """Wait up to `capacity_wait_s` for a slot that a closing session gives back; True when one was handed over.

        A client that closes its session and at once opens another must not be refused because
        the server has not yet finished closing the first (its environment's `close()` may still run).
        """
        if self.shutting_down or self.capacity_wait_s <= 0:
            return False
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[bool] = loop.create_future()
        self._slot_waiters.append(waiter)
        # A timer, not `asyncio.timeout`: this may run before any task does (a request answered at once by the
        # transport's fast path `at_once`).
        timer = loop.call_later(self.capacity_wait_s, _give_up, waiter)
        try:
            return await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled() and waiter.result():
                self.release()
            raise
        finally:
            timer.cancel()
            if not waiter.done() or waiter.cancelled() or not waiter.result():
                with contextlib.suppress(ValueError):
                    self._slot_waiters.remove(waiter)

    def release(self) -> None:
        """Give back a slot taken by `try_reserve`, handing it to the longest-waiting connection if any."""
        self._closed_since_reclaim += 1
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self._reserved -= 1
        if self.shared_limit is not None:
            self.shared_limit.release()
        if self._reserved == 0 and self._closed_since_reclaim >= self.RECLAIM_MIN_CLOSED and self._reclaim is None:
            self._reclaim = asyncio.get_running_loop().call_later(self.RECLAIM_AFTER_S, self._reclaim_if_idle)

    def _reclaim_if_idle(self) -> None:
        self._reclaim = None
        if self._reserved == 0 and not self.shutting_down:
            self._closed_since_reclaim = 0
            release_memory()

    def add(self, session: Session) -> None:
        self._sessions[session.id] = session
        self.metrics.session_opened()
        if self._sweeper is None and self.idle_timeout_s:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep_forever(), name="envkit-sweep")

    def forget(self, session: Session) -> None:
        self._sessions.pop(session.id, None)
        if session.ended is not None:
            self._ended[session.id] = session.ended
            if len(self._ended) > self.REMEMBER_ENDED:
                self._ended.popitem(last=False)

    def get(self, session_id: str) -> Session | None:
        """The open session with this id, or None."""
        return self._sessions.get(session_id)

    def ended(self, session_id: str) -> tuple[int, str] | None:
        """(close code, reason) of a session that was open here and has ended; None if never seen or long gone."""
        return self._ended.get(session_id)

    async def run_in_worker(self, function: Callable[[], Any]) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, function)

    async def _sweep_forever(self) -> None:
        assert self.idle_timeout_s
        interval = min(1.0, self.idle_timeout_s / 4)
        while True:
            await asyncio.sleep(interval)
            try:
                self._reap_idle(time.monotonic() - self.idle_timeout_s)
            except Exception:   # the sweep must outlive any one session's trouble
                logger.exception("session sweep failed; retrying in %gs", interval)

    def _reap_idle(self, deadline: float) -> None:
        idle = [s for s in self._sessions.values() if not s.busy and s.last_active < deadline]
        reason = f"idle timeout: no message for {self.idle_timeout_s:g}s"
        for session in idle:
            logger.info("reaping session %s: idle for more than %gs", session.id, self.idle_timeout_s)
            self._end_in_background(session, CloseCode.IDLE_TIMEOUT, reason)

    def _end_in_background(self, session: Session, code: int, reason: str) -> None:
        """End a session on a task of its own: an env whose close() hangs holds up no other."""
        ending = asyncio.get_running_loop().create_task(session.end(code, reason))
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)

    async def shutdown(self) -> None:
        """Refuse new sessions, close every socket with 1001 and every environment; idempotent."""
        self.shutting_down = True
        while self._slot_waiters:
            waiter = self._slot_waiters.popleft()
            if not waiter.done():
                waiter.set_result(False)
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        if self._reclaim is not None:
            self._reclaim.cancel()
            self._reclaim = None
        sessions = list(self._sessions.values())
        await asyncio.gather(*(s.end(CloseCode.SHUTDOWN, "server shutting down") for s in sessions),
                             *list(self._ending))
        self._executor.shutdown(wait=False, cancel_futures=True)
