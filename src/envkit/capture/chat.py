"""The chat-completions request as the proxy reads it, and the assistant message it answers with.

`read_request` checks a request body and says in one line what is wrong with it (`RequestError`); constrained
decoding (a response format, guided decoding, structured outputs, a logit bias, a forced tool) is refused: its
mask on the logits is no part of the sampling policy a trainer recomputes. `parse_completion` reads Qwen3-style
tool calls, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, out of the sampled text, as the tiny
model's chat template renders them. `message_key` is what decides that two messages are the same turn.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChatRequest", "RequestError", "read_request", "check_message", "parse_completion", "message_key",
           "tools_key", "for_template", "assistant_message", "CONSTRAINED"]

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
#: Request fields that ask for constrained decoding (OpenAI's and vLLM's names).
CONSTRAINED = ("response_format", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
               "guided_decoding_backend", "structured_outputs", "logit_bias", "allowed_token_ids", "bad_words")
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
THINK_END = "</think>"


class RequestError(ValueError):
    """A request the proxy will not serve; the message is the one line the caller sees (HTTP `status`)."""

    def __init__(self, message: str, *, status: int = 400, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.status = status
        self.code = code


@dataclass
class ChatRequest:
    """A checked chat-completions request."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    stream: bool = False
    include_usage: bool = False
    max_tokens: int | None = None
    parse_tools: bool = True
    #: What the caller asked of sampling; recorded, not applied (the session's `Sampling` is).
    requested_sampling: dict[str, Any] = field(default_factory=dict)


def _positive_int(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"{name} must be a positive integer, got {json.dumps(value)}")
    return value


def _constrained(body: dict[str, Any]) -> list[str]:
    found = []
    for name in CONSTRAINED:
        value = body.get(name)
        if name == "response_format":
            if value is not None and not (isinstance(value, dict) and value.get("type", "text") == "text"):
                found.append(name)
        elif value not in (None, False, "", [], {}):
            found.append(name)
    choice = body.get("tool_choice")
    if choice not in (None, "auto", "none"):
        found.append("tool_choice")
    return found


def _is_tool(tool: Any) -> bool:
    function = tool.get("function") if isinstance(tool, dict) else None
    return (isinstance(function, dict) and isinstance(function.get("name"), str) and bool(function["name"])
            and isinstance(function.get("parameters", {}), dict)
            and isinstance(function.get("description", ""), (str, type(None))))


def _is_tool_call(call: Any) -> bool:
    function = call.get("function") if isinstance(call, dict) else None
    return (isinstance(function, dict) and isinstance(function.get("name"), str)
            and isinstance(function.get("arguments", "{}"), (str, dict)))


def check_message(index: int, message: Any) -> None:
    """`RequestError` naming what is wrong with `messages[index]` (its role, content, tool calls or text fields)."""
    where = f"messages[{index}]"
    if not isinstance(message, dict) or not isinstance(message.get("role"), str) or message["role"] not in ROLES:
        raise RequestError(f"{where} must be an object whose role is one of {', '.join(sorted(ROLES))}")
    content = message.get("content")
    if content is not None and not isinstance(content, str) and not (isinstance(content, list) and all(
            isinstance(part, dict) and isinstance(part.get("text", ""), str) for part in content)):
        raise RequestError(f"{where}.content must be a string, null, or a list of parts like "
                           "{\"type\": \"text\", \"text\": STRING}")
    calls = message.get("tool_calls")
    if calls is not None and (not isinstance(calls, list) or not all(map(_is_tool_call, calls))):
        raise RequestError(f"{where}.tool_calls must be a list of {{\"type\": \"function\", \"function\": "
                           "{\"name\": STRING, \"arguments\": JSON STRING}}")
    for name in ("name", "tool_call_id", "reasoning_content"):
        if message.get(name) is not None and not isinstance(message[name], str):
            raise RequestError(f"{where}.{name} must be a string")


def assistant_message(texts: list[str], calls: list[dict[str, Any]], thoughts: list[str]) -> dict[str, Any]:
    """An assistant turn read from a dialect's blocks or parts: its texts as content (None when it only calls
    tools), its tool calls, its thoughts as `reasoning_content`."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    if thoughts:
        message["reasoning_content"] = "".join(thoughts)
    return message


def read_request(body: Any) -> ChatRequest:
    """The request in `body` (parsed JSON), checked; `RequestError` says what is wrong."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object with `messages`")
    constrained = _constrained(body)
    if constrained:
        raise RequestError(f"constrained decoding is not supported here ({', '.join(constrained)}): the capture "
                           "proxy samples from the unconstrained policy it records; drop these fields",
                           code="constrained_decoding")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("`messages` must be a non-empty list of chat messages")
    for index, message in enumerate(messages):
        check_message(index, message)
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(map(_is_tool, tools))):
        raise RequestError("`tools` must be a list of {\"type\": \"function\", \"function\": {\"name\": STRING, "
                           "\"parameters\": OBJECT}}")
    if body.get("n", 1) != 1 or isinstance(body.get("n"), bool):
        raise RequestError("only one completion per request is supported (n=1)")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("`stream` must be true or false")
    options = body.get("stream_options") or {}
    limits = [value for value in (_positive_int(body, "max_tokens"), _positive_int(body, "max_completion_tokens"))
              if value is not None]
    return ChatRequest(messages=messages, tools=tools or None, stream=stream,
                       include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
                       max_tokens=min(limits) if limits else None, parse_tools=body.get("tool_choice") != "none",
                       requested_sampling={name: body[name] for name in ("temperature", "top_p", "seed")
                                           if name in body})


def _text(content: Any) -> str:
    """A message's content as text: a string, the text parts of a list, or empty."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content
                       if isinstance(part, dict) and part.get("type") in ("text", "input_text"))
    return ""


def _arguments(arguments: Any) -> Any:
    """Tool-call arguments as a value: a JSON string parsed (kept as it is when it is not JSON)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def for_template(message: dict[str, Any]) -> dict[str, Any]:
    """`message` as chat templates expect it: content as text, tool-call arguments as values."""
    shaped = {**message, "content": _text(message.get("content"))}
    if message.get("tool_calls"):
        shaped["tool_calls"] = [{**call, "function": {**call.get("function", {}),
                                                      "arguments": _arguments(call.get("function", {})
                                                                              .get("arguments"))}}
                                for call in message["tool_calls"] if isinstance(call, dict)]
    return shaped


def message_key(message: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two messages the same turn: role, text, and tool calls by name and arguments (parsed, keys
    sorted). Ids, `null` against empty content, and how a client spaces its JSON do not count."""
    calls = tuple((str(call.get("function", {}).get("name", "")),
                   json.dumps(_arguments(call.get("function", {}).get("arguments")), sort_keys=True))
                  for call in message.get("tool_calls") or () if isinstance(call, dict))
    return (message.get("role"), _text(message.get("content")).strip(), calls)


def tools_key(tools: list[dict[str, Any]] | None) -> str:
    return json.dumps(tools or [], sort_keys=True)


def parse_completion(text: str, *, parse_tools: bool = True) -> dict[str, Any]:
    """The assistant message for sampled `text`: what comes before `</think>` as `reasoning_content`, each
    well-formed `<tool_call>` block (a JSON object with a `name`) as a tool call, the rest as content."""
    message: dict[str, Any] = {"role": "assistant"}
    if THINK_END in text:   # the thinking block may have opened in the prompt (Qwen3's generation prompt)
        thought, text = text.split(THINK_END, 1)
        thought = thought.replace("<think>", "").strip()
        if thought:
            message["reasoning_content"] = thought
    calls = []
    if parse_tools:
        def take(match: re.Match[str]) -> str:
            try:
                call = json.loads(match.group(1))
            except ValueError:
                return match.group(0)
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                return match.group(0)
            calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                          "function": {"name": call["name"],
                                       "arguments": json.dumps(call.get("arguments", {}))}})
            return ""

        text = TOOL_CALL.sub(take, text)
    content = text.strip()
    message["content"] = content if content or not calls else None
    if calls:
        message["tool_calls"] = calls
    return message
