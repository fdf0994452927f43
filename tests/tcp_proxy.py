"""A TCP proxy on 127.0.0.1 that can 'cut the network': stop forwarding without closing anything."""

from __future__ import annotations

import asyncio
import threading
from urllib.parse import urlsplit


class FreezableProxy:
    """Forwards 127.0.0.1:<port> to a target URL's host and port until `freeze()` is called.

    After `freeze()` every byte in either direction is dropped silently and no socket is closed,
    as when a network path dies: only keepalive pings can tell.
    """

    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self.target = (parts.hostname, parts.port)
        self.frozen = False
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FreezableProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    def freeze(self) -> None:
        self.frozen = True

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection(*self.target)
        await asyncio.gather(self._pipe(client_reader, server_writer), self._pipe(server_reader, client_writer),
                             return_exceptions=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                writer.close()
                return
            if not self.frozen:
                writer.write(data)
                await writer.drain()
