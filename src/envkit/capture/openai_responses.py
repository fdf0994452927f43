"""OpenAI's Responses API (`POST /v1/responses`): `input` items (messages, `function_call`,
`function_call_output`, `reasoning`), function tools, and the streaming events (`response.created` ...
`response.completed`).

The proxy keeps no responses (`previous_response_id` is refused): the agent sends its whole conversation as
`input`, and consecutive assistant items (reasoning, a message, function calls) are read as one assistant turn,
the way the proxy answered them, so an agent that sends its items back continues its chain.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

from starlette.responses import JSONResponse, Response

from .chat import ChatRequest, RequestError, check_message
from .dialect import Dialect, event_stream
from .openai_chat import openai_error
from .records import Call

__all__ = ["RESPONSES"]

TEXT_PARTS = ("input_text", "output_text", "text", "reasoning_text", "summary_text")


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) and part.get("type") in TEXT_PARTS
                                         and isinstance(part.get("text"), str) for part in content):
        return "".join(part["text"] for part in content)
    raise RequestError(f"{where} must be a string or a list of {{\"type\": \"input_text\", \"text\": STRING}} parts")


def _string(item: dict[str, Any], name: str, where: str) -> str:
    if not isinstance(item.get(name), str):
        raise RequestError(f"{where}.{name} must be a string")
    return item[name]


def _messages(items: list[Any]) -> list[dict[str, Any]]:
    """Input items as chat messages, consecutive assistant items as one assistant turn."""
    messages: list[dict[str, Any]] = []
    turn: dict[str, Any] | None = None

    def assistant() -> dict[str, Any]:
        nonlocal turn
        if turn is None:
            turn = {"role": "assistant", "content": ""}
            messages.append(turn)
        return turn

    for index, item in enumerate(items):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise RequestError(f"{where} must be an object (a message or a function_call / function_call_output)")
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "assistant":
            assistant()["content"] += _text_of(item.get("content"), f"{where}.content")
        elif kind == "function_call":
            assistant().setdefault("tool_calls", []).append(
                {"id": _string(item, "call_id", where), "type": "function", "function": {
                    "name": _string(item, "name", where), "arguments": _string(item, "arguments", where)}})
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            assistant()["reasoning_content"] = _text_of(parts, f"{where}.content")
        elif kind == "message" and item.get("role") in ("user", "system", "developer"):
            turn = None
            messages.append({"role": item["role"], "content": _text_of(item.get("content"), f"{where}.content")})
        elif kind == "function_call_output":
            turn = None
            messages.append({"role": "tool", "tool_call_id": _string(item, "call_id", where),
                             "content": _text_of(item.get("output"), f"{where}.output")})
        else:
            raise RequestError(f"{where}: items of type {json.dumps(kind)} (role {json.dumps(item.get('role'))}) are "
                               "not served here; send messages, function_call and function_call_output items")
    return messages


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    if not isinstance(tools, list) or not all(
            isinstance(tool, dict) and tool.get("type") == "function" and isinstance(tool.get("name"), str)
            and tool["name"] and isinstance(tool.get("parameters") or {}, dict)
            and isinstance(tool.get("description") or "", str) for tool in tools):
        raise RequestError("`tools` must be a list of {\"type\": \"function\", \"name\": STRING, \"parameters\": "
                           "OBJECT}; other tool types are not served here")
    return [{"type": "function", "function": {"name": tool["name"], "description": tool.get("description") or "",
                                              "parameters": tool.get("parameters") or {}}} for tool in tools] or None


def read_responses(body: Any) -> ChatRequest:
    """A Responses API request as the proxy's `ChatRequest`; `RequestError` says what is wrong."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object with `input`")
    if body.get("previous_response_id") is not None or body.get("conversation") is not None:
        raise RequestError("the capture proxy keeps no responses: send the whole conversation as `input` and drop "
                           "previous_response_id / conversation", code="stateful_request")
    choice = body.get("tool_choice")
    text = body.get("text")
    shaped = isinstance(text, dict) and isinstance(text.get("format"), dict) and text["format"].get("type") != "text"
    if choice not in (None, "auto", "none") or shaped:
        raise RequestError("constrained decoding is not supported here (a forced tool_choice or a text format): the "
                           "capture proxy samples from the unconstrained policy it records",
                           code="constrained_decoding")
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise RequestError(f"max_output_tokens must be a positive integer, got {json.dumps(limit)}")
    if not isinstance(body.get("stream", False), bool):
        raise RequestError("`stream` must be true or false")
    raw = body.get("input")
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise RequestError("`input` must be a string or a non-empty list of items")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise RequestError("`instructions` must be a string")
    messages = ([{"role": "system", "content": instructions}] if instructions else []) + _messages(items)
    for index, message in enumerate(messages):
        check_message(index, message)
    return ChatRequest(messages=messages, tools=_tools(body.get("tools")), stream=body.get("stream", False),
                       max_tokens=limit, parse_tools=choice != "none",
                       requested_sampling={name: body[name] for name in ("temperature", "top_p") if name in body})


def _output(reply: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if reply.get("reasoning_content"):
        items.append({"type": "reasoning", "id": f"rs_{uuid.uuid4().hex}", "summary": [],
                      "content": [{"type": "reasoning_text", "text": reply["reasoning_content"]}]})
    if reply.get("content"):
        items.append({"type": "message", "id": f"msg_{uuid.uuid4().hex}", "role": "assistant", "status": "completed",
                      "content": [{"type": "output_text", "text": reply["content"], "annotations": [],
                                   "logprobs": []}]})
    for tool_call in reply.get("tool_calls") or ():
        items.append({"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": tool_call["id"],
                      "name": tool_call["function"]["name"], "arguments": tool_call["function"]["arguments"],
                      "status": "completed"})
    return items


def response_of(call: Call, chat: ChatRequest) -> dict[str, Any]:
    """The recorded call as a Responses API response object."""
    completion = call.response
    usage = completion["usage"]
    cut = completion["choices"][0]["finish_reason"] == "length"
    return {"id": f"resp_{completion['id'].removeprefix('chatcmpl-')}", "object": "response",
            "created_at": completion["created"], "status": "incomplete" if cut else "completed",
            "model": completion["model"], "output": _output(completion["choices"][0]["message"]),
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None, "error": None,
            "instructions": None, "parallel_tool_calls": True, "tool_choice": "auto" if chat.parse_tools else "none",
            "tools": [{"type": "function", "name": tool["function"]["name"], "strict": False,
                       "parameters": tool["function"].get("parameters"),
                       "description": tool["function"].get("description")} for tool in chat.tools or ()],
            "usage": {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
                      "total_tokens": usage["total_tokens"], "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}}


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """One output item's events between `output_item.added` and `output_item.done`."""
    where = {"item_id": item["id"], "output_index": index}
    if item["type"] == "function_call":
        yield {"type": "response.function_call_arguments.delta", **where, "delta": item["arguments"]}
        yield {"type": "response.function_call_arguments.done", **where, "arguments": item["arguments"],
               "name": item["name"]}
        return
    kind = "output_text" if item["type"] == "message" else "reasoning_text"
    part = item["content"][0]
    if kind == "output_text":
        yield {"type": "response.content_part.added", **where, "content_index": 0, "part": {**part, "text": ""}}
    yield {"type": f"response.{kind}.delta", **where, "content_index": 0, "delta": part["text"], "logprobs": []}
    yield {"type": f"response.{kind}.done", **where, "content_index": 0, "text": part["text"], "logprobs": []}
    if kind == "output_text":
        yield {"type": "response.content_part.done", **where, "content_index": 0, "part": part}


def _events(response: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    opening = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [{"type": "response.created", "response": opening},
              {"type": "response.in_progress", "response": opening}]
    for index, item in enumerate(response["output"]):
        empty = {**item, "status": "in_progress"} | (
            {"arguments": ""} if item["type"] == "function_call" else {"content": []})
        events += [{"type": "response.output_item.added", "output_index": index, "item": empty},
                   *_item_events(index, item),
                   {"type": "response.output_item.done", "output_index": index, "item": item}]
    events.append({"type": f"response.{response['status']}", "response": response})
    for number, event in enumerate(events):
        yield event["type"], {**event, "sequence_number": number}


def _answer(call: Call, chat: ChatRequest) -> Response:
    response = response_of(call, chat)
    return event_stream(_events(response)) if chat.stream else JSONResponse(response)


RESPONSES = Dialect(path="/v1/responses", read=read_responses, answer=_answer, error=openai_error)
