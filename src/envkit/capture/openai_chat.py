"""OpenAI's chat completions (`POST /v1/chat/completions`), JSON or streamed as chat-completion chunks."""

from __future__ import annotations

from typing import Any, Iterator

from starlette.responses import JSONResponse, Response

from .chat import ChatRequest, read_request
from .dialect import Dialect, event_stream
from .records import Call

__all__ = ["CHAT", "openai_error"]


def openai_error(status: int, message: str, code: str) -> JSONResponse:
    """OpenAI's error shape; a spent budget says not to retry (`x-should-retry: false`: the SDK then does not)."""
    kind = {401: "authentication_error", 429: "insufficient_quota"}.get(status, "invalid_request_error")
    return JSONResponse({"error": {"message": message, "type": kind, "param": None, "code": code}},
                        status_code=status, headers={"x-should-retry": "false"} if status == 429 else None)


def _chunks(response: dict[str, Any], include_usage: bool) -> Iterator[tuple[None, Any]]:
    """A finished completion replayed as chat-completion chunks: the role, the content, each tool call, the
    finish reason, the usage when asked for, then `[DONE]`."""
    head = {key: response[key] for key in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = response["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        return None, {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    first: dict[str, Any] = {"role": "assistant", "content": ""}
    if message.get("reasoning_content"):
        first["reasoning_content"] = message["reasoning_content"]
    yield chunk(first)
    if message.get("content"):
        yield chunk({"content": message["content"]})
    for index, call in enumerate(message.get("tool_calls") or ()):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, choice["finish_reason"])
    if include_usage:
        yield None, {**head, "choices": [], "usage": response["usage"]}
    yield None, "[DONE]"


def _answer(call: Call, chat: ChatRequest) -> Response:
    if chat.stream:
        return event_stream(_chunks(call.response, chat.include_usage))
    return JSONResponse(call.response)


CHAT = Dialect(path="/v1/chat/completions", read=read_request, answer=_answer, error=openai_error)
