"""Running loads: N sessions in step, a ramp to the largest N that holds, and session churn.

Every run is bounded: `timeout_s` for a load, a time budget for a ramp, a duration for churn.
Sessions still busy when time runs out count as failures ("timed out").
"""

from __future__ import annotations

import asyncio
import functools
import resource
import secrets
import time
from typing import Any, Awaitable, Callable, Coroutine, Sequence, TypeVar

from ..client import EnvClient, websocket_url
from ..client.placement import parse_server_urls, spread
from ..errors import EnvConnectionError
from ..protocol import ErrorCode
from .drivers import driver_class
from .http_surfaces import HTTP_PROTOCOLS
from .report import ChurnResult, LoadResult, RampResult, latency_summary
from .script import ActionTemplate, SessionScript, Tally

#: A ramp level refused with this code met the server's own session limit, not the end of what it can do.
CAPACITY_REACHED = ErrorCode.CAPACITY_REACHED

__all__ = ["run_load", "run_ramp", "run_churn", "run_sync", "DEFAULT_CONNECT_CONCURRENCY"]

T = TypeVar("T")
Progress = Callable[[str], None]

#: Handshakes in flight at once; more only fills the server's accept queue.
DEFAULT_CONNECT_CONCURRENCY = 128
PROGRESS_EVERY_S = 1.0


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a benchmark coroutine on uvloop when installed, after raising the open-file limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return uvloop.run(coroutine)


async def _report_progress(progress: Progress, describe: Callable[[], str]) -> None:
    while True:
        await asyncio.sleep(PROGRESS_EVERY_S)
        progress(describe())


def _label(url: str | Sequence[str]) -> str:
    """The servers under load, for the report: one `ws://` URL, or the list / registry as given."""
    servers = parse_server_urls(url)
    return websocket_url(servers[0]) if len(servers) == 1 and not servers[0].endswith("/replicas") else ",".join(servers)


async def run_load(url: str | Sequence[str], sessions: int, steps: int, *, action: dict[str, Any] | None = None, client: str = "auto",
                   protocol: str = "ws", tool: str = "echo",
                   timeout_s: float = 60.0, connect_concurrency: int = DEFAULT_CONNECT_CONCURRENCY,
                   on_open: Callable[[], Awaitable[None]] | None = None,
                   on_stepped: Callable[[], Awaitable[None]] | None = None,
                   progress: Progress | None = None) -> LoadResult:
    """Open `sessions` sessions, reset each, then (once all are open) step each `steps` times in sequence.

    Three phases, so that steps/s measures stepping only: every session connects and resets; at a
    barrier all of them start stepping; once every session has had its last step reply, all close.
    The step window runs from the barrier's release to the last step reply.

    `on_open` is awaited while every session is open and before any steps, e.g. to measure the
    server's memory with all of them held; `on_stepped` once every session has finished stepping and
    before any closes. The run stops after `timeout_s` whatever remains. `url` may name several
    servers or a registry (see `envkit.client.placement`): the sessions are then spread over them by load.

    `protocol`: `ws` steps over the WebSocket protocol (`client` picks the library); `mcp` calls `tool`
    with the action as its arguments over MCP (`tools/call` at `/mcp`), `ors` over the Open Reward
    Standard (`/call`); see `http_surfaces`.
    """
    driver_cls = driver_for(protocol, client, tool)
    targets = [websocket_url(server) for server in await spread(url, sessions)]
    tally = Tally()
    template = ActionTemplate(action)
    run_id = secrets.token_hex(3)
    drivers = [driver_cls(target, SessionScript(tally, template, run_id, index, steps))
               for index, target in enumerate(targets)]
    gate = asyncio.Semaphore(connect_concurrency)
    all_opened, start, all_stepped, closing = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()
    opened = stepped = 0
    marks: dict[str, float] = {}
    started, cpu_started = time.perf_counter(), time.process_time()

    async def session(driver: Any) -> None:
        nonlocal opened, stepped
        async with gate:
            await driver.open()
        opened += 1
        if opened == sessions:
            all_opened.set()
        if driver.script.outcome is None:
            await start.wait()
            await driver.run_steps()
        stepped += 1
        if stepped == sessions:
            all_stepped.set()
        await closing.wait()
        await driver.close()

    async def release_steps() -> None:
        await all_opened.wait()
        marks["opened"] = time.perf_counter()
        if on_open is not None:
            await on_open()
        marks["steps"], marks["steps_cpu"] = time.perf_counter(), time.process_time()
        start.set()
        await all_stepped.wait()
        marks["stepped"], marks["stepped_cpu"] = time.perf_counter(), time.process_time()
        if on_stepped is not None:
            await on_stepped()
        closing.set()

    def describe() -> str:
        rate = tally.steps / (time.perf_counter() - marks["steps"]) if "steps" in marks else 0.0
        return f"open {opened}/{sessions}  steps {tally.steps}/{sessions * steps}  {rate:,.0f} steps/s"

    tasks = [asyncio.ensure_future(session(driver)) for driver in drivers]
    helpers = [asyncio.ensure_future(release_steps())]
    if progress is not None:
        helpers.append(asyncio.ensure_future(_report_progress(progress, describe)))
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout_s)
    except asyncio.TimeoutError:
        for driver in drivers:
            driver.script.fail(f"timed out: still running after {timeout_s:g} s")
        await asyncio.gather(*(driver.close() for driver in drivers), return_exceptions=True)
    finally:
        for helper in helpers:
            helper.cancel()
    ended, cpu_ended = time.perf_counter(), time.process_time()
    step_start = marks.get("steps", ended)
    step_seconds = max(tally.last_step_at - step_start, 1e-9) if tally.steps else 0.0
    cpu_window = marks.get("stepped", ended) - marks.get("steps", started)
    cpu_stepping = marks.get("stepped_cpu", cpu_ended) - marks.get("steps_cpu", cpu_started)
    return LoadResult(
        url=_label(url), client=driver_cls.name if protocol == "ws" else protocol, sessions=sessions,
        steps_per_session=steps, sessions_ok=tally.sessions_ok,
        steps=tally.steps, step_seconds=round(step_seconds, 4),
        steps_per_s=round(tally.steps / step_seconds, 1) if tally.steps else 0.0,
        step_latency_ms=latency_summary(tally.step_latencies), connect_reset_ms=latency_summary(tally.connect_latencies),
        failures=dict(tally.failures), mismatches=tally.mismatches if template.checks_echo else None,
        loadgen_cpu=round(cpu_stepping / max(cpu_window, 1e-9), 3),
        wall_s=round(ended - started, 3), open_seconds=round(marks.get("opened", ended) - started, 4))


def driver_for(protocol: str, client: str = "auto", tool: str = "echo") -> Callable[[str, SessionScript], Any]:
    """What drives one session of `protocol` (`ws`, `mcp` or `ors`); raises ValueError for an unknown one."""
    if protocol == "ws":
        return driver_class(client)
    if protocol not in HTTP_PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; choose ws, mcp or ors")
    return functools.partial(HTTP_PROTOCOLS[protocol], tool=tool)


async def run_ramp(url: str | Sequence[str], *, start: int = 64, max_sessions: int = 16384, steps: int = 3, budget_s: float = 60.0,
                   threshold: float = 0.95, action: dict[str, Any] | None = None, client: str = "auto",
                   connect_concurrency: int = DEFAULT_CONNECT_CONCURRENCY, progress: Progress | None = None) -> RampResult:
    """Double the number of sessions held open at once until fewer than `threshold` succeed.

    Stops at the first failing level, at `max_sessions`, or when `budget_s` is spent.
    """
    began = time.perf_counter()
    levels: list[dict[str, Any]] = []
    best, sessions = 0, start
    client_name = driver_class(client).name
    while True:
        remaining = budget_s - (time.perf_counter() - began)
        if remaining < 1.0:
            stopped = f"time budget of {budget_s:g} s spent"
            break
        if progress is not None:
            progress(f"ramp: {sessions} sessions")
        result = await run_load(url, sessions, steps, action=action, client=client, timeout_s=remaining,
                                connect_concurrency=connect_concurrency, progress=progress)
        levels.append({key: value for key, value in result.to_dict().items() if key not in ("url", "client", "mode")})
        if result.success_rate < threshold:
            if any(reason.startswith("timed out") for reason in result.failures):
                stopped = (f"time budget of {budget_s:g} s ran out during the {sessions}-session level "
                           f"({result.success_rate:.1%} had succeeded)")
            else:
                stopped = f"{sessions} sessions: {result.success_rate:.1%} succeeded, below {threshold:.0%}"
                if any(CAPACITY_REACHED in reason for reason in result.failures):
                    stopped += await _capacity_note(url)
            break
        best = sessions
        if sessions >= max_sessions:
            stopped = f"reached the ramp maximum of {max_sessions} sessions"
            break
        sessions = min(sessions * 2, max_sessions)
    return RampResult(url=_label(url), client=client_name, max_sessions_held=best, threshold=threshold,
                      stopped_because=stopped, levels=levels, wall_s=round(time.perf_counter() - began, 2))


async def _capacity_note(url: str | Sequence[str]) -> str:
    """Why the ramp stopped when the servers refused sessions for capacity: their own limit, not their machinery."""
    try:
        limits = [(await EnvClient(one).health()).get("max_sessions") for one in parse_server_urls(url)]
    except EnvConnectionError:
        limits = []
    total = sum(limits) if limits and all(isinstance(limit, int) for limit in limits) else None
    cap = f" of {total} sessions" if total is not None else ""
    return (f"; the server's own limit{cap} (max_concurrent_envs, GET /health max_sessions) refused the rest "
            "(CAPACITY_REACHED), so this measures that setting: restart it with a higher --max-concurrent-envs to "
            "find what it can hold")


async def run_churn(url: str | Sequence[str], seconds: float, *, workers: int = 16, client: str = "auto",
                    progress: Progress | None = None) -> ChurnResult:
    """`workers` loops each opening a session, resetting it and closing it, again and again, for `seconds`.

    `client="auto"` picks the raw client for `ws://` URLs: opening connections is its strength. With
    several servers, each loop keeps to the server it was given (spread by load at the start).
    """
    targets = [websocket_url(server) for server in await spread(url, workers)]
    plain = all(target.startswith("ws://") for target in targets)
    driver_cls = driver_class("raw" if client == "auto" and plain else client)
    tally = Tally()
    template = ActionTemplate()
    run_id = secrets.token_hex(3)
    began, cpu_began = time.perf_counter(), time.process_time()
    deadline = began + seconds

    async def loop(worker: int) -> None:
        count = 0
        while time.perf_counter() < deadline:
            driver = driver_cls(targets[worker], SessionScript(tally, template, run_id, worker * 1_000_000 + count, 0))
            await driver.open()
            await driver.close()
            count += 1

    reporter = None
    if progress is not None:
        reporter = asyncio.ensure_future(_report_progress(
            progress, lambda: f"churn: {tally.sessions_ok} sessions, {sum(tally.failures.values())} failed"))
    try:
        await asyncio.wait_for(asyncio.gather(*(loop(worker) for worker in range(workers))), seconds + 30)
    except asyncio.TimeoutError:
        tally.failures["timed out: a session did not open or close within 30 s"] += 1
    finally:
        if reporter is not None:
            reporter.cancel()
    elapsed = time.perf_counter() - began
    return ChurnResult(url=_label(url), client=driver_cls.name, workers=workers, sessions=tally.sessions_ok,
                       seconds=round(elapsed, 3), sessions_per_s=round(tally.sessions_ok / elapsed, 1),
                       connect_reset_ms=latency_summary(tally.connect_latencies), failures=dict(tally.failures),
                       loadgen_cpu=round((time.process_time() - cpu_began) / elapsed, 3))
