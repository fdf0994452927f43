"""JSON-RPC 2.0 without I/O: reading one message, writing results and errors.

`/mcp` takes one message per HTTP POST. A batch (a JSON array) is refused: MCP dropped batching in
its 2025-06-18 revision, and neither OpenEnv's client nor the `mcp` SDK sends one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["RpcError", "Message", "parse_message", "result_response", "error_response", "PARSE_ERROR",
           "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS", "INTERNAL_ERROR", "SERVER_ERROR", "SESSION_GONE"]

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: No session could be opened (capacity, shutdown, a failing environment factory); OpenEnv uses this code too.
SERVER_ERROR = -32000
#: The session or episode named in the request has ended (closed, reaped when idle, server shut down).
SESSION_GONE = -32001

RequestId = str | int


class RpcError(Exception):
    """An error answered as a JSON-RPC error object: `code`, `message` and optional `data`.

    `request_id`: the id of the request it answers, when the error is found before the request is read.
    """

    def __init__(self, code: int, message: str, data: Any = None, *, request_id: RequestId | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.request_id = request_id

    def as_dict(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


@dataclass(slots=True)
class Message:
    """One client message: a request (with `id`), a notification (no `id`) or a response to the server."""

    method: str | None
    params: dict[str, Any] = field(default_factory=dict)
    id: RequestId | None = None

    @property
    def is_request(self) -> bool:
        return self.method is not None and self.id is not None

    @property
    def is_notification(self) -> bool:
        return self.method is not None and self.id is None


def parse_message(raw: bytes) -> Message:
    """Read one JSON-RPC message; raises `RpcError` (parse error, invalid request, params not an object)."""
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise RpcError(PARSE_ERROR, f"Parse error: the body is not JSON ({error}); send one JSON-RPC 2.0 object")
    if isinstance(message, list):
        raise RpcError(INVALID_REQUEST, "Invalid Request: batches are not supported; send one JSON-RPC request "
                                        "per POST")
    if not isinstance(message, dict):
        raise RpcError(INVALID_REQUEST, 'Invalid Request: expected a JSON object such as {"jsonrpc": "2.0", '
                                        '"id": 1, "method": "tools/list"}')
    request_id = message.get("id")
    if request_id is not None and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer')
    if message.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"', request_id=request_id)
    method = message.get("method")
    if method is None and ("result" in message or "error" in message) and request_id is not None:
        return Message(None, {}, request_id)   # a response to a server request: nothing to answer
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "method" must be a non-empty string, e.g. "tools/list"',
                       request_id=request_id)
    params = message.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, 'Invalid params: "params" must be an object of named parameters',
                       request_id=request_id)
    if "id" in message and request_id is None:
        raise RpcError(INVALID_REQUEST, 'Invalid Request: "id" must not be null; leave it out for a notification')
    return Message(method, params, request_id)


def result_response(request_id: RequestId | None, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def error_response(request_id: RequestId | None, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.as_dict()}
