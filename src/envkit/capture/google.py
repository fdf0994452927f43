"""Google's Gemini API, `generateContent` and `streamGenerateContent` (`POST /v1beta/models/MODEL:...`):
`contents` with text, `functionCall`, `functionResponse` and thought parts, `systemInstruction`, function
declarations, and the streamed form (server-sent events of whole responses).

A request is read into the proxy's chat form: `systemInstruction` a system message; a `model` turn's text parts its
content, its `functionCall` parts its tool calls (`args` as the arguments), its thought parts its reasoning; a user
turn's `functionResponse` parts one tool message each, then its text. The answer goes back as parts, so an agent
that sends its contents back continues its chain.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from starlette.responses import JSONResponse, Response

from .chat import ChatRequest, RequestError, assistant_message, check_message
from .dialect import Dialect, event_stream
from .records import Call

__all__ = ["GENERATE", "STREAM_GENERATE", "google_error"]

STATUSES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 413: "INVALID_ARGUMENT", 429: "RESOURCE_EXHAUSTED",
            502: "UNAVAILABLE"}


def google_error(status: int, message: str, code: str) -> JSONResponse:
    """Google's error shape (`{"error": {"code", "message", "status"}}`)."""
    return JSONResponse({"error": {"code": status, "message": message,
                                   "status": STATUSES.get(status, "INVALID_ARGUMENT")}}, status_code=status)


def _parts(turn: Any, where: str) -> list[dict[str, Any]]:
    parts = turn.get("parts") if isinstance(turn, dict) else None
    if not isinstance(parts, list) or not all(isinstance(part, dict) for part in parts):
        raise RequestError(f"{where} must be an object with `parts`, a list of parts (objects)")
    return parts


def _text(part: dict[str, Any], where: str) -> str:
    if not isinstance(part["text"], str):
        raise RequestError(f"{where}: a part's text must be a string")
    return part["text"]


def _model_turn(parts: list[dict[str, Any]], where: str) -> dict[str, Any]:
    text, thought, calls = [], [], []
    for part in parts:
        if "functionCall" in part:
            call = part["functionCall"]
            if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not isinstance(
                    call.get("args", {}), dict):
                raise RequestError(f"{where}: a functionCall needs a name (string) and args (object)")
            calls.append({"id": str(call.get("id") or call["name"]), "type": "function",
                          "function": {"name": call["name"], "arguments": json.dumps(call.get("args", {}))}})
        elif "text" in part:
            (thought if part.get("thought") is True else text).append(_text(part, where))
        elif "thoughtSignature" not in part:
            raise RequestError(f"{where}: a model turn holds text and functionCall parts here")
    return assistant_message(text, calls, thought)


def _result(response: Any) -> str:
    """A function's response as the text the model reads: its lone `output` or `result` string, else its JSON."""
    if isinstance(response, dict) and len(response) == 1 and isinstance(next(iter(response.values())), str) \
            and next(iter(response)) in ("output", "result"):
        return next(iter(response.values()))
    return json.dumps(response)


def _user_turn(parts: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
    results, text = [], []
    for part in parts:
        if "functionResponse" in part:
            answer = part["functionResponse"]
            if not isinstance(answer, dict) or not isinstance(answer.get("name"), str):
                raise RequestError(f"{where}: a functionResponse needs a name (string) and a response")
            results.append({"role": "tool", "tool_call_id": str(answer.get("id") or answer["name"]),
                            "content": _result(answer.get("response"))})
        elif "text" in part:
            text.append(_text(part, where))
        else:
            raise RequestError(f"{where}: a user turn holds text and functionResponse parts here")
    return [*results, {"role": "user", "content": "".join(text)}] if text or not results else results


def _tools(tools: Any) -> list[dict[str, Any]] | None:
    if tools is None:
        return None
    declared = []
    for tool in tools if isinstance(tools, list) else [None]:
        functions = tool.get("functionDeclarations") if isinstance(tool, dict) else None
        if not isinstance(functions, list) or not all(
                isinstance(function, dict) and isinstance(function.get("name"), str) and function["name"]
                and isinstance(function.get("parametersJsonSchema", function.get("parameters", {})), dict)
                and isinstance(function.get("description", ""), str) for function in functions):
            raise RequestError("`tools` must be a list of {\"functionDeclarations\": [{\"name\": STRING, "
                               "\"parameters\": OBJECT}]}; other tools are not served here")
        declared += [{"type": "function", "function": {
            "name": function["name"], "description": function.get("description", ""),
            "parameters": function.get("parametersJsonSchema", function.get("parameters", {}))}}
            for function in functions]
    return declared or None


def read_generate(body: Any) -> ChatRequest:
    """A generateContent request as the proxy's `ChatRequest`; `RequestError` says what is wrong."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object with `contents`")
    config, tool_config = body.get("generationConfig") or {}, body.get("toolConfig") or {}
    calling = tool_config.get("functionCallingConfig") or {} if isinstance(tool_config, dict) else None
    if not isinstance(config, dict) or not isinstance(calling, dict):
        raise RequestError("`generationConfig` and `toolConfig.functionCallingConfig` must be objects")
    mode = calling.get("mode")
    if mode not in (None, "AUTO", "NONE", "MODE_UNSPECIFIED") or config.get("responseSchema") is not None \
            or config.get("responseJsonSchema") is not None or config.get("responseMimeType", "text/plain") \
            not in ("text/plain", None):
        raise RequestError("constrained decoding is not supported here (a forced function call or a response "
                           "schema): the capture proxy samples from the unconstrained policy it records",
                           code="constrained_decoding")
    if config.get("candidateCount", 1) != 1:
        raise RequestError("only one candidate per request is supported (candidateCount 1)")
    limit = config.get("maxOutputTokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise RequestError(f"generationConfig.maxOutputTokens must be a positive integer, got {json.dumps(limit)}")
    contents = body.get("contents")
    if not isinstance(contents, list) or not contents:
        raise RequestError("`contents` must be a non-empty list of turns")
    system = body.get("systemInstruction")
    messages = [] if system is None else [{"role": "system", "content": "".join(
        _text(part, "systemInstruction") for part in _parts(system, "systemInstruction") if "text" in part)}]
    for index, turn in enumerate(contents):
        where = f"contents[{index}]"
        parts = _parts(turn, where)
        role = turn.get("role", "user")
        if role not in ("user", "model"):
            raise RequestError(f"{where}.role must be user or model")
        messages += [_model_turn(parts, where)] if role == "model" else _user_turn(parts, where)
    for index, message in enumerate(messages):
        check_message(index, message)
    return ChatRequest(messages=messages, tools=_tools(body.get("tools")), max_tokens=limit,
                       parse_tools=mode != "NONE",
                       requested_sampling={name: config[name] for name in ("temperature", "topP", "topK", "seed")
                                           if name in config})


def content_of(call: Call) -> dict[str, Any]:
    """The recorded call as a generateContent response."""
    completion = call.response
    reply = completion["choices"][0]["message"]
    parts: list[dict[str, Any]] = []
    if reply.get("reasoning_content"):
        parts.append({"text": reply["reasoning_content"], "thought": True})
    if reply.get("content"):
        parts.append({"text": reply["content"]})
    for tool_call in reply.get("tool_calls") or ():
        arguments = json.loads(tool_call["function"]["arguments"])
        parts.append({"functionCall": {"id": tool_call["id"], "name": tool_call["function"]["name"],
                                       "args": arguments if isinstance(arguments, dict) else {"value": arguments}}})
    usage = completion["usage"]
    finish = "MAX_TOKENS" if completion["choices"][0]["finish_reason"] == "length" else "STOP"
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
            "usageMetadata": {"promptTokenCount": usage["prompt_tokens"],
                              "candidatesTokenCount": usage["completion_tokens"],
                              "totalTokenCount": usage["total_tokens"]},
            "modelVersion": completion["model"], "responseId": completion["id"].removeprefix("chatcmpl-")}


def _answer(call: Call, chat: ChatRequest) -> Response:
    content = content_of(call)
    return event_stream([(None, content)]) if chat.stream else JSONResponse(content)


def _read_streamed(body: Any) -> ChatRequest:
    return dataclasses.replace(read_generate(body), stream=True)


GENERATE = Dialect(path="/v1beta/models/{model}:generateContent", read=read_generate, answer=_answer,
                   error=google_error)
STREAM_GENERATE = Dialect(path="/v1beta/models/{model}:streamGenerateContent", read=_read_streamed, answer=_answer,
                          error=google_error)
