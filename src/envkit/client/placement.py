"""Choosing a server for each new session when an environment is served by several.

A client given several servers (`"http://a:8001,http://b:8001"`) or a registry
(`http://head:8000/replicas`, from `envkit serve --ray`) opens each new session on the least-loaded
live server. Loads come from each server's `/health` (or from the registry's one listing), kept for
`ttl_s` seconds and shared by every client in the process that names the same servers, so a
process with 512 clients polls each server about once a second, not 512 times. Between polls the
sessions a process has just placed count as load, so a burst of resets spreads out instead of
piling onto the server that looked emptiest a moment ago.

Servers that do not report their load (OpenEnv's `/health` has no counts) get new sessions in
turn. A server that refuses a session (full) or cannot be reached is skipped until the next poll. The
client never moves a live session: a lost server ends only its own sessions (`SessionLostError`),
and the next `reset()` lands elsewhere.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import httpx

from ..errors import CapacityError, EnvConnectionError
from .urls import http_url

__all__ = ["parse_server_urls", "is_registry_url", "ServerLoad", "Placement", "REGISTRY_PATH"]

T = TypeVar("T")

#: The path a registry lists its replicas at; a server URL ending in it names a registry, not a server.
REGISTRY_PATH = "/replicas"


def parse_server_urls(spec: str | Sequence[str]) -> list[str]:
    """The servers named by `spec`: one URL, a comma-separated list, or a sequence of either.

    Blank entries are dropped and repeats kept once, in order. Raises `ValueError` with an example
    when nothing is left or an entry has spaces (a mistyped list).

    Example:
        parse_server_urls("http://a:8001, http://b:8001") == ["http://a:8001", "http://b:8001"]
    """
    entries = [spec] if isinstance(spec, str) else list(spec)
    urls: list[str] = []
    for entry in entries:
        for part in str(entry).split(","):
            url = part.strip()
            if not url:
                continue
            if any(char.isspace() for char in url):
                raise ValueError(f"{url!r} is not a server URL; separate several with commas, e.g. "
                                 "'http://127.0.0.1:8001,http://127.0.0.1:8002'")
            if url not in urls:
                urls.append(url)
    if not urls:
        raise ValueError("no server URL given; e.g. 'http://127.0.0.1:8001' or 'http://a:8001,http://b:8001' or "
                         f"a registry 'http://head:8000{REGISTRY_PATH}'")
    registries = [url for url in urls if is_registry_url(url)]
    if registries and len(urls) > 1:
        raise ValueError(f"{registries[0]} is a registry, which lists its servers itself; give it alone")
    return urls


def is_registry_url(url: str) -> bool:
    """Whether `url` names a registry of servers (its path ends in `/replicas`) rather than one server."""
    return url.rstrip("/").endswith(REGISTRY_PATH)


#: The session limit assumed, for ranking only, of a server that does not state one.
UNKNOWN_LIMIT = 64


def _limit(document: dict[str, Any]) -> int | None:
    value = document.get("max_sessions")
    return int(value) if isinstance(value, (int, float)) else None


@dataclass
class ServerLoad:
    """One server as the last poll saw it, plus the sessions placed on it since."""

    url: str
    active_sessions: int = 0
    #: None when the server does not say (an OpenEnv server's `/health`): never taken for full until it refuses.
    max_sessions: int | None = 0
    live: bool = True
    #: Set when the server refused a session: full until the next poll.
    full: bool = False
    #: Sessions this process opened there since the poll (the poll does not count them yet).
    placed: int = 0
    #: Why the server is skipped, when it is.
    problem: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def free(self) -> int:
        if self.full:
            return 0
        if self.max_sessions is None:
            return 1 << 30
        return self.max_sessions - self.active_sessions - self.placed

    @property
    def load(self) -> float:
        """Share of the server's slots taken, counting sessions placed since the poll."""
        return (self.active_sessions + self.placed) / max(self.max_sessions or UNKNOWN_LIMIT, 1)


class Placement:
    """Least-loaded placement over a fixed list of servers or a registry's live replicas.

    Use `Placement.shared(urls)` so every client of the same servers in a process shares one view.
    `open_session(connect)` tries servers from least to most loaded and returns what `connect(url)`
    returned for the first that accepts.
    """

    _shared: dict[tuple[Any, ...], Placement] = {}
    _shared_lock = threading.Lock()

    def __init__(self, urls: Sequence[str], *, ttl_s: float = 1.0, timeout_s: float = 5.0,
                 headers: dict[str, str] | None = None) -> None:
        self.urls = parse_server_urls(urls)
        self.registry = self.urls[0] if is_registry_url(self.urls[0]) else None
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.headers = dict(headers or {})
        self.servers: dict[str, ServerLoad] = {}
        self._polled_at = float("-inf")
        self._polls: dict[asyncio.AbstractEventLoop, asyncio.Future[None]] = {}
        self._state_lock = threading.Lock()
        #: The registry's own `/health` document, from its last listing.
        self.registry_health: dict[str, Any] = {}

    @classmethod
    def shared(cls, urls: Sequence[str], *, ttl_s: float = 1.0, timeout_s: float = 5.0,
               headers: dict[str, str] | None = None) -> Placement:
        """The process-wide placement for these servers and request headers (created on first use)."""
        key = (tuple(parse_server_urls(urls)), ttl_s, tuple(sorted((headers or {}).items())))
        with cls._shared_lock:
            placement = cls._shared.get(key)
            if placement is None:
                placement = cls._shared[key] = cls(key[0], ttl_s=ttl_s, timeout_s=timeout_s, headers=headers)
            return placement

    # -- loads --------------------------------------------------------------------------------

    async def refresh(self, *, force: bool = False) -> None:
        """Poll the servers (or the registry) unless the last poll is younger than `ttl_s`.

        Concurrent callers on one event loop share one poll.
        """
        if not force and time.monotonic() - self._polled_at < self.ttl_s:
            return
        loop = asyncio.get_running_loop()
        poll = self._polls.get(loop)
        if poll is None:
            poll = self._polls[loop] = loop.create_task(self._poll())
            poll.add_done_callback(lambda _: self._polls.pop(loop, None))
        await asyncio.shield(poll)

    async def _poll(self) -> None:
        async with httpx.AsyncClient(timeout=self.timeout_s, trust_env=False, headers=self.headers) as http:
            if self.registry is not None:
                servers = await self._poll_registry(http)
            else:
                servers = list(await asyncio.gather(*(self._poll_server(http, url) for url in self.urls)))
        with self._state_lock:
            self.servers = {server.url: server for server in servers}
            self._polled_at = time.monotonic()

    async def _poll_server(self, http: httpx.AsyncClient, url: str) -> ServerLoad:
        try:
            response = await http.get(http_url(url) + "/health")
            document = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as error:
            return ServerLoad(url, live=False, problem=f"{type(error).__name__}: {error}")
        if not isinstance(document, dict):
            return ServerLoad(url, live=False, problem=f"/health answered HTTP {response.status_code}")
        healthy = document.get("status", "healthy") == "healthy"
        return ServerLoad(url, int(document.get("active_sessions", 0)), _limit(document),
                          live=healthy, problem="" if healthy else f"status {document.get('status')}",
                          details=document)

    async def _poll_registry(self, http: httpx.AsyncClient) -> list[ServerLoad]:
        assert self.registry is not None
        url = http_url(self.registry.rstrip("/")[: -len(REGISTRY_PATH)]) + REGISTRY_PATH
        try:
            response = await http.get(url)
            document = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as error:
            raise EnvConnectionError(url, f"the registry did not answer ({type(error).__name__}: {error})") from None
        if not isinstance(document, dict) or not isinstance(document.get("replicas"), list):
            raise EnvConnectionError(url, "not a registry: GET /replicas did not answer a replica listing "
                                     f"(HTTP {response.status_code}); is it the URL `envkit serve --ray` printed?")
        self.registry_health = {key: value for key, value in document.items() if key != "replicas"}
        return [ServerLoad(entry["url"], int(entry.get("active_sessions", 0)), _limit(entry),
                           details=entry)
                for entry in document["replicas"] if isinstance(entry, dict) and entry.get("url")]

    def ranked(self) -> list[ServerLoad]:
        """Live servers with a free slot, least loaded first (ties in random order)."""
        with self._state_lock:
            live = [server for server in self.servers.values() if server.live and server.free > 0]
        random.shuffle(live)
        return sorted(live, key=lambda server: server.load)

    def _mark(self, url: str, *, placed: bool = False, full: bool = False, problem: str = "") -> None:
        with self._state_lock:
            server = self.servers.get(url)
            if server is None:
                return
            if placed:
                server.placed += 1
            if full:
                server.full = True
            if problem:
                server.live, server.problem = False, problem

    # -- opening sessions ---------------------------------------------------------------------

    async def open_session(self, connect: Callable[[str], Awaitable[T]]) -> T:
        """`connect(url)` on the least-loaded live server, moving on past servers that refuse or are gone.

        Raises `CapacityError` when every live server is full, `EnvConnectionError` when none can be reached.
        """
        await self.refresh()
        tried: list[str] = []
        full: CapacityError | None = None
        for attempt in range(2):   # a second, fresh poll when every server of the cached view failed
            if attempt:
                await self.refresh(force=True)
            for server in self.ranked():
                if server.url in tried:
                    continue
                tried.append(server.url)
                try:
                    result = await connect(server.url)
                except CapacityError as error:
                    full = error
                    self._mark(server.url, full=True)
                    continue
                except EnvConnectionError as error:
                    self._mark(server.url, problem=error.reason)
                    continue
                self._mark(server.url, placed=True)
                return result
        where = self.registry or ", ".join(self.urls)
        with self._state_lock:
            any_live = any(server.live for server in self.servers.values())
        if full is not None or any_live:
            raise CapacityError(where, f"every server is at capacity ({self.describe()})")
        raise EnvConnectionError(where, f"no live server accepted a session ({self.describe() or 'none listed'})")

    def assign(self, count: int) -> list[str]:
        """URLs for `count` new sessions, each on the server least loaded once those before it are counted.

        For load generators that open many sessions at once; call `refresh()` first.
        """
        chosen = []
        for _ in range(count):
            ranked = self.ranked()
            if not ranked:
                with self._state_lock:
                    ranked = [server for server in self.servers.values() if server.live]
                if not ranked:
                    raise EnvConnectionError(self.registry or ", ".join(self.urls),
                                             f"no live server ({self.describe() or 'none listed'})")
                ranked.sort(key=lambda server: server.load)
            chosen.append(ranked[0].url)
            self._mark(ranked[0].url, placed=True)
        return chosen

    def describe(self) -> str:
        """One line per server, as last seen: `url active/max` or `url down (why)`."""
        with self._state_lock:
            servers = list(self.servers.values())
        return "; ".join(f"{server.url} {server.active_sessions + server.placed}/{server.max_sessions or '?'}"
                         f"{' full' if server.full else ''}"
                         if server.live else f"{server.url} down ({server.problem})" for server in servers)

    async def health(self) -> dict[str, Any]:
        """The servers' `/health` summed: status, active and maximum sessions, and one entry per server."""
        await self.refresh(force=True)
        with self._state_lock:
            servers = list(self.servers.values())
        live = [server for server in servers if server.live]
        document: dict[str, Any] = {
            "status": "healthy" if live else "unavailable",
            "active_sessions": sum(server.active_sessions for server in live),
            "max_sessions": sum(server.max_sessions or 0 for server in live),   # left out below when unknown
            "servers": [{"url": server.url, "live": server.live, "active_sessions": server.active_sessions,
                         "max_sessions": server.max_sessions, **({"problem": server.problem} if server.problem else {})}
                        for server in servers],
        }
        if any(server.max_sessions is None for server in live):
            del document["max_sessions"]   # a server that does not say: the whole's limit is unknown
        if self.registry is not None:
            document["registry"] = self.registry
        return document

    async def first_live(self) -> str:
        """A live server, for requests that any of them answers alike (`/tools`, `/metadata`)."""
        await self.refresh()
        ranked = self.ranked() or [server for server in self.servers.values() if server.live]
        if not ranked:
            raise EnvConnectionError(self.registry or ", ".join(self.urls),
                                     f"no live server ({self.describe() or 'none listed'})")
        return ranked[0].url


async def spread(spec: str | Sequence[str], count: int) -> list[str]:
    """Server URLs for `count` sessions opened at once: the one server, or spread by load over several.

    For load generators (`envkit bench`, eval) that open their sessions themselves.
    """
    servers = parse_server_urls(spec)
    if len(servers) == 1 and not is_registry_url(servers[0]):
        return servers * count
    placement = Placement(servers)
    await placement.refresh(force=True)
    return placement.assign(count)
