"""A server's addresses: the WebSocket session endpoint and the HTTP root, from any form a user gives."""

from __future__ import annotations

__all__ = ["http_url", "websocket_url"]


def websocket_url(base_url: str) -> str:
    """`http://h:p`, `ws://h:p` or either with `/ws` → the session endpoint `ws://h:p/ws`."""
    url = base_url.rstrip("/")
    for http, ws in (("http://", "ws://"), ("https://", "wss://")):
        if url.startswith(http):
            url = ws + url[len(http):]
    if not url.startswith(("ws://", "wss://")):
        url = "ws://" + url
    return url if url.endswith("/ws") else url + "/ws"


def http_url(base_url: str) -> str:
    """The HTTP root of a server given by any of the forms `websocket_url` accepts."""
    url = websocket_url(base_url)[: -len("/ws")]
    return "http" + url[2:]
