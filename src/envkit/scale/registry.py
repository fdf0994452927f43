"""The registry of a scaled-out environment: which envkit servers are live, where, and how loaded.

It only says where the servers are; clients connect to them directly (nothing proxies frames).

Each server keeps one WebSocket open to the registry's `/register` while it lives: a first frame
describing it (URL, node, pid, session limit), then its session count whenever that changes (at
most every `LOAD_EVERY_S`). When the server's process dies, the kernel closes that socket and the
registry drops the server at once; a restarted server registers again.

    GET /replicas   {"status", "replicas": [{"url", "active_sessions", "max_sessions", ...}], sums}
    GET /health     {"status", "active_sessions", "max_sessions", "replicas", "replicas_expected"}

`RegistryClient` is the server's side: it registers and reports, reconnecting if the registry restarts.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

import orjson
from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake

__all__ = ["create_registry_app", "Registry", "RegistryClient", "LOAD_EVERY_S"]

logger = logging.getLogger("envkit.registry")

#: How often a server looks at its session count and reports a change (seconds).
LOAD_EVERY_S = 0.25
#: Pause before a server tries again to reach a registry that is not answering (seconds).
RECONNECT_EVERY_S = 1.0


class Registry:
    """The live servers, by the connection each registered on."""

    def __init__(self, expected: int | None = None) -> None:
        self.expected = expected
        self.replicas: dict[int, dict[str, Any]] = {}
        self._next = 0
        #: Set while the servers are being stopped on purpose: their leaving is no news.
        self.stopping = False

    def add(self, entry: dict[str, Any]) -> int:
        self._next += 1
        self.replicas[self._next] = {**entry, "registered_at": time.time()}
        logger.info("replica %s registered: %s", entry.get("replica"), entry.get("url"))
        return self._next

    def update(self, key: int, load: dict[str, Any]) -> None:
        if key in self.replicas:
            self.replicas[key].update({name: load[name] for name in ("active_sessions", "max_sessions") if name in load})

    def drop(self, key: int) -> None:
        entry = self.replicas.pop(key, None)
        if entry is not None:
            logger.log(logging.INFO if self.stopping else logging.WARNING, "replica %s at %s is gone; dropped from "
                       "the registry", entry.get("replica"), entry.get("url"))

    def listing(self) -> dict[str, Any]:
        replicas = sorted(self.replicas.values(), key=lambda entry: (entry.get("replica", 0), entry["url"]))
        return {**self.summary(), "replicas": replicas}

    def summary(self) -> dict[str, Any]:
        replicas = self.replicas.values()
        return {
            "status": "healthy" if replicas else "unavailable",
            "active_sessions": sum(int(entry.get("active_sessions", 0)) for entry in replicas),
            "max_sessions": sum(int(entry.get("max_sessions", 0)) for entry in replicas),
            "live_replicas": len(self.replicas),
            "replicas_expected": self.expected,
        }


def create_registry_app(registry: Registry) -> FastAPI:
    """The registry's HTTP and WebSocket routes."""
    app = FastAPI(title="envkit registry")

    @app.get("/replicas")
    async def replicas() -> dict[str, Any]:
        """The live servers with their URL and load."""
        return registry.listing()

    @app.get("/health")
    async def health() -> dict[str, Any]:
        """The live servers' sessions and limits summed."""
        return registry.summary()

    @app.websocket("/register")
    async def register(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            first = orjson.loads(await websocket.receive_text())
        except WebSocketDisconnect:
            return
        except orjson.JSONDecodeError:
            first = None
        if not isinstance(first, dict) or not isinstance(first.get("url"), str):
            await websocket.close(1008, "the first frame must describe the server: {\"url\": ..., ...}")
            return
        key = registry.add(first)
        try:
            while True:
                load = orjson.loads(await websocket.receive_text())
                if isinstance(load, dict):
                    registry.update(key, load)
        except (WebSocketDisconnect, orjson.JSONDecodeError):
            pass
        finally:
            registry.drop(key)

    return app


class RegistryClient:
    """A server's registration: describe it once, then report its session count while it lives."""

    def __init__(self, registry_url: str, describe: dict[str, Any], load: Callable[[], dict[str, int]]) -> None:
        self.url = registry_url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1) + "/register"
        self.describe = describe
        self.load = load

    async def run(self) -> None:
        """Stay registered until cancelled, reconnecting whenever the registry goes away."""
        while True:
            try:
                async with connect(self.url, proxy=None, compression=None, open_timeout=10) as ws:
                    last = self.load()
                    await ws.send(orjson.dumps({**self.describe, **last}).decode())
                    while True:
                        await asyncio.sleep(LOAD_EVERY_S)
                        now = self.load()
                        if now != last:
                            await ws.send(orjson.dumps(now).decode())
                            last = now
            except (OSError, InvalidHandshake, ConnectionClosed, asyncio.TimeoutError) as error:
                logger.warning("registry at %s unreachable (%s); retrying in %gs", self.url, error, RECONNECT_EVERY_S)
            await asyncio.sleep(RECONNECT_EVERY_S)
