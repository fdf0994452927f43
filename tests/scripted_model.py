"""A small real HTTP server on a unix socket that answers OpenAI's `/v1/chat/completions` with scripted replies.

It stands in for envkit.capture's proxy in the agent tests (the proxy is built separately, behind the same socket
and key contract: it listens on `<channel_dir>/proxy.sock` and serves one API key per session); its replies are
scripted because no model runs here. It records each request (path, key, body), answers 401 to a wrong key, 429
once the script is spent, and `GET /v1/models`; `stream: true` gets the reply as server-sent events.
"""

from __future__ import annotations

import json
import os
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any


def tool_reply(*commands: str, tool: str = "shell") -> dict[str, Any]:
    """An assistant message calling `tool` (the reference agent's `shell`) once per command, in OpenAI's format."""
    calls = [{"id": f"call_{index}_{abs(hash(command)) % 10_000}", "type": "function",
              "function": {"name": tool, "arguments": json.dumps({"command": command})}}
             for index, command in enumerate(commands)]
    return {"role": "assistant", "content": None, "tool_calls": calls}


def text_reply(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True


class ScriptedModel:
    """Serves `replies` in order on the unix socket `path` to callers with key `api_key` (a context manager)."""

    def __init__(self, path: str, api_key: str, replies: list[dict[str, Any]]) -> None:
        self.path, self.api_key = path, api_key
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.refused: list[str] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def address_string(self) -> str:
                return "unix"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                key = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
                if key != model.api_key:
                    model.refused.append(key)
                    self._json(401, {"error": {"message": "unknown API key", "type": "invalid_request_error"}})
                    return
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                model.requests.append(body)
                if not model.replies:
                    self._json(429, {"error": {"message": "this session's calls are spent"}})
                    return
                message = model.replies.pop(0)
                reason = "tool_calls" if message.get("tool_calls") else "stop"
                answer = {"id": f"chatcmpl-{len(model.requests)}", "object": "chat.completion",
                          "created": int(time.time()), "model": body.get("model", "scripted"),
                          "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                          "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}
                if body.get("stream"):
                    self._stream(answer)
                else:
                    self._json(200, answer)

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, answer: dict[str, Any]) -> None:
                choice = answer["choices"][0]
                delta = {**choice["message"]}
                if delta.get("tool_calls"):
                    delta["tool_calls"] = [{"index": index, **call} for index, call in enumerate(delta["tool_calls"])]
                chunk = {**answer, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": choice["finish_reason"]}]}
                data = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = _Server(path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> ScriptedModel:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
        os.unlink(self.path)
