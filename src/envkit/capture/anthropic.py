"""Anthropic's Messages API (`POST /v1/messages`): text, `tool_use` and `tool_result` blocks, thinking blocks, and
the streaming events (`message_start`, `content_block_*`, `message_delta`, `message_stop`).

A request is read into the proxy's chat form: `system` a system message; an assistant message's text blocks its
content, its `tool_use` blocks its tool calls (`input` as the arguments), its thinking block its reasoning; a user
message's `tool_result` blocks one tool message each, then its text. The answer goes back as blocks, so an agent
that sends its history back unchanged continues its chain exactly as on the chat route.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

from starlette.responses import JSONResponse, Response

from .chat import ChatRequest, RequestError, assistant_message, check_message
from .dialect import Dialect, event_stream
from .records import Call

__all__ = ["MESSAGES", "anthropic_error"]

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}
ERROR_TYPES = {401: "authentication_error", 413: "request_too_large", 429: "rate_limit_error", 502: "api_error"}


def anthropic_error(status: int, message: str, code: str) -> JSONResponse:
    """Anthropic's error shape; a spent budget says not to retry (`x-should-retry: false`)."""
    return JSONResponse({"type": "error", "error": {"type": ERROR_TYPES.get(status, "invalid_request_error"),
                                                    "message": message}},
                        status_code=status, headers={"x-should-retry": "false"} if status == 429 else None)


def _text_of(content: Any, where: str) -> str:
    """A string, or the text of a list of text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(block, dict) and block.get("type") == "text"
                                         and isinstance(block.get("text"), str) for block in content):
        return "".join(block["text"] for block in content)
    raise RequestError(f"{where} must be a string or a list of {{\"type\": \"text\", \"text\": STRING}} blocks")


def _blocks(message: Any, index: int) -> list[dict[str, Any]]:
    where = f"messages[{index}]"
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise RequestError(f"{where} must be an object whose role is user or assistant")
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(block, dict) and isinstance(block.get("type"), str)
                                                for block in content):
        raise RequestError(f"{where}.content must be a string or a list of content blocks (objects with a type)")
    return content


def _assistant(blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
    text, calls, thought = [], [], []
    for block in blocks:
        kind = block["type"]
        if kind == "text":
            text.append(_text_of([block], where))
        elif kind == "tool_use":
            if not isinstance(block.get("name"), str) or not isinstance(block.get("input", {}), dict):
                raise RequestError(f"{where}: a tool_use block needs a name (string) and an input (object)")
            calls.append({"id": str(block.get("id", "")), "type": "function",
                          "function": {"name": block["name"], "arguments": json.dumps(block.get("input", {}))}})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thought.append(block["thinking"])
        elif kind != "redacted_thinking":
            raise RequestError(f"{where}: an assistant message holds text, tool_use and thinking blocks, not {kind}")
    return assistant_message(text, calls, thought)


def _user(blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    results, text = [], []
    for block in blocks:
        if block["type"] == "tool_result":
            if not isinstance(block.get("tool_use_id"), str):
                raise RequestError(f"{where}: a tool_result block needs its tool_use_id (string)")
            results.append({"role": "tool", "tool_call_id": block["tool_use_id"],
                            "content": _text_of(block.get("content", ""), f"{where}: a tool_result's content")})
        elif block["type"] == "text":
            text.append(_text_of([block], where))
        else:
            raise RequestError(f"{where}: a user message holds text and tool_result blocks here, not "
                               f"{block['type']}")
    return [*results, {"role": "user", "content": "".join(text)}] if text or not results else results


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(
            isinstance(tool, dict) and isinstance(tool.get("name"), str) and tool["name"]
            and isinstance(tool.get("input_schema", {}), dict)
            and isinstance(tool.get("description", ""), str) for tool in tools):
        raise RequestError("`tools` must be a list of {\"name\": STRING, \"description\": STRING, \"input_schema\": "
                           "OBJECT}")
    return [{"type": "function", "function": {"name": tool["name"], "description": tool.get("description", ""),
                                              "parameters": tool.get("input_schema", {})}} for tool in tools] or None


def read_messages(body: Any) -> ChatRequest:
    """A Messages API request as the proxy's `ChatRequest`; `RequestError` says what is wrong."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object with `messages` and `max_tokens`")
    choice = body.get("tool_choice")
    kind = choice.get("type") if isinstance(choice, dict) else choice
    if kind not in (None, "auto", "none"):
        raise RequestError(f"constrained decoding is not supported here (tool_choice {json.dumps(choice)}): the "
                           "capture proxy samples from the unconstrained policy it records",
                           code="constrained_decoding")
    limit = body.get("max_tokens")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise RequestError(f"max_tokens must be a positive integer, got {json.dumps(limit)}")
    if not isinstance(body.get("stream", False), bool):
        raise RequestError("`stream` must be true or false")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError("`messages` must be a non-empty list of messages")
    messages = [] if body.get("system") is None else [
        {"role": "system", "content": _text_of(body["system"], "`system`")}]
    for index, message in enumerate(raw):
        blocks = _blocks(message, index)
        where = f"messages[{index}]"
        messages += [_assistant(blocks, where)] if message["role"] == "assistant" else _user(blocks, where)
    for index, message in enumerate(messages):
        check_message(index, message)
    return ChatRequest(messages=messages, tools=_tools(body.get("tools")), stream=body.get("stream", False),
                       max_tokens=limit, parse_tools=kind != "none",
                       requested_sampling={name: body[name] for name in ("temperature", "top_p", "top_k")
                                           if name in body})


def message_of(call: Call) -> dict[str, Any]:
    """The recorded call as a Messages API response."""
    reply = call.response["choices"][0]["message"]
    content: list[dict[str, Any]] = []
    if reply.get("reasoning_content"):
        content.append({"type": "thinking", "thinking": reply["reasoning_content"], "signature": ""})
    if reply.get("content"):
        content.append({"type": "text", "text": reply["content"]})
    for tool_call in reply.get("tool_calls") or ():
        arguments = json.loads(tool_call["function"]["arguments"])
        content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:24]}",
                        "name": tool_call["function"]["name"],
                        "input": arguments if isinstance(arguments, dict) else {"value": arguments}})
    usage = call.response["usage"]
    return {"id": f"msg_{call.response['id'].removeprefix('chatcmpl-')}", "type": "message", "role": "assistant",
            "model": call.response["model"], "content": content,
            "stop_reason": STOP_REASONS.get(call.response["choices"][0]["finish_reason"], "end_turn"),
            "stop_sequence": None,
            "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"]}}


def _events(message: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The message as Messages API streaming events: each block opened, its whole delta, closed."""
    head = {**message, "content": [], "stop_reason": None,
            "usage": {"input_tokens": message["usage"]["input_tokens"], "output_tokens": 0}}
    yield "message_start", {"type": "message_start", "message": head}
    deltas = {"thinking": ("thinking_delta", "thinking"), "text": ("text_delta", "text")}
    for index, block in enumerate(message["content"]):
        empty = {**block, **({"input": {}} if block["type"] == "tool_use" else {block["type"]: ""})}
        if block["type"] == "thinking":
            empty["signature"] = ""
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": empty}
        if block["type"] == "tool_use":
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            kind, field = deltas[block["type"]]
            delta = {"type": kind, field: block[field]}
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"],
                                                                "stop_sequence": None},
                            "usage": {"output_tokens": message["usage"]["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


def _answer(call: Call, chat: ChatRequest) -> Response:
    message = message_of(call)
    return event_stream(_events(message)) if chat.stream else JSONResponse(message)


MESSAGES = Dialect(path="/v1/messages", read=read_messages, answer=_answer, error=anthropic_error)
