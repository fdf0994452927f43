"""Bad input to the capture proxy: every malformed request gets a 4xx with a one-line reason, never a 500, and the
proxy carries on serving.

The agent is the policy under training, so anything may reach the proxy. Each field of a request in every dialect
(chat, Messages, Responses, generateContent: top level, a message of each role, a tool call and its result, a
tool) is set to a value of every JSON type in turn; lone surrogates,
nesting too deep and bodies past the size limit are sent as raw bytes. A 200 MB body is refused with the
process's peak memory (the proxy runs here) growing by less than 256 MB. The engine answers at once with a
scripted reply (`InstantEngine`): the proxy's checks are tested, not a model.
"""

from __future__ import annotations

import copy
import json
import socket
from typing import Any, Iterator

import httpx
import pytest

from capture_model import InstantEngine, tiny_echo
from envkit.capture import CaptureProxy, CaptureSession

pytestmark = pytest.mark.timeout(600)

#: A value of every JSON type, and strings that are not what a field expects.
VALUES: list[Any] = [None, True, False, 0, -1, 1.5, 1e308, "", "x", "\ud800", [], [1], [None], [{}], {}, {"a": 1}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "shell", "arguments": '{"command": "ls"}'}}
TOOL = {"type": "function", "function": {"name": "shell", "description": "Run a command.",
                                         "parameters": {"type": "object", "properties": {}}}}
VALID = {"model": "tiny", "messages": [
    {"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}], "tools": [TOOL], "max_tokens": 8}
#: Where each value goes: a path of keys and indexes into VALID.
FIELDS: list[tuple[Any, ...]] = [
    ("model",), ("messages",), ("messages", 1), ("tools",), ("tools", 0), ("stream",), ("stream_options",),
    ("max_tokens",), ("max_completion_tokens",), ("n",), ("temperature",), ("top_p",), ("seed",), ("tool_choice",),
    ("response_format",), ("logit_bias",), *((("messages", index, name) for index in range(4)
                                               for name in ("role", "content", "name"))),
    ("messages", 1, "content", 0), ("messages", 2, "tool_calls"), ("messages", 2, "tool_calls", 0),
    ("messages", 2, "tool_calls", 0, "function"), ("messages", 2, "tool_calls", 0, "function", "name"),
    ("messages", 2, "tool_calls", 0, "function", "arguments"), ("messages", 2, "reasoning_content"),
    ("messages", 3, "tool_call_id"), ("tools", 0, "function"), ("tools", 0, "function", "name"),
    ("tools", 0, "function", "parameters"), ("tools", 0, "function", "description")]
MESSAGES = {"model": "tiny", "max_tokens": 8, "system": "Be brief.", "messages": [
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                      {"type": "tool_use", "id": "t1", "name": "shell", "input": {"command": "ls"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}]}],
    "tools": [{"name": "shell", "description": "Run a command.", "input_schema": {"type": "object"}}]}
MESSAGES_FIELDS: list[tuple[Any, ...]] = [
    ("model",), ("max_tokens",), ("system",), ("messages",), ("messages", 0), ("messages", 0, "role"),
    ("messages", 0, "content"), ("messages", 1, "content"), ("messages", 1, "content", 0),
    ("messages", 1, "content", 0, "text"), ("messages", 1, "content", 1), *(
        ("messages", 1, "content", 1, name) for name in ("type", "id", "name", "input")),
    ("messages", 2, "content", 0),
    *(("messages", 2, "content", 0, name) for name in ("type", "tool_use_id", "content")),
    ("tools",), ("tools", 0), *(("tools", 0, name) for name in ("name", "description", "input_schema")), ("stream",),
    ("tool_choice",), ("temperature",)]
RESPONSES = {"model": "tiny", "instructions": "Be brief.", "max_output_tokens": 8, "input": [
    {"role": "user", "content": "hi"},
    {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"command": "ls"}'},
    {"type": "function_call_output", "call_id": "c1", "output": "a.txt"}],
    "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]}
RESPONSES_FIELDS: list[tuple[Any, ...]] = [
    ("model",), ("instructions",), ("max_output_tokens",), ("input",), ("input", 0), ("input", 0, "role"),
    ("input", 0, "content"), ("input", 1), *(("input", 1, name) for name in ("type", "call_id", "name", "arguments")),
    ("input", 2, "output"), ("input", 2, "call_id"), ("tools",), ("tools", 0),
    *(("tools", 0, name) for name in ("type", "name", "parameters", "description")), ("stream",), ("tool_choice",),
    ("text",), ("previous_response_id",), ("temperature",)]
GENERATE = {"systemInstruction": {"parts": [{"text": "Be brief."}]}, "contents": [
    {"role": "user", "parts": [{"text": "hi"}]},
    {"role": "model", "parts": [{"functionCall": {"name": "shell", "args": {"command": "ls"}}}]},
    {"role": "user", "parts": [{"functionResponse": {"name": "shell", "response": {"output": "a.txt"}}}]}],
    "tools": [{"functionDeclarations": [{"name": "shell", "parameters": {"type": "object"}}]}],
    "generationConfig": {"maxOutputTokens": 8}, "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}}}
GENERATE_FIELDS: list[tuple[Any, ...]] = [
    ("systemInstruction",), ("systemInstruction", "parts"), ("systemInstruction", "parts", 0),
    ("systemInstruction", "parts", 0, "text"), ("contents",), ("contents", 0), ("contents", 0, "role"),
    ("contents", 0, "parts"), ("contents", 0, "parts", 0), ("contents", 0, "parts", 0, "text"),
    ("contents", 1, "parts", 0, "functionCall"), ("contents", 1, "parts", 0, "functionCall", "name"),
    ("contents", 1, "parts", 0, "functionCall", "args"), ("contents", 2, "parts", 0, "functionResponse"),
    ("contents", 2, "parts", 0, "functionResponse", "name"),
    ("contents", 2, "parts", 0, "functionResponse", "response"),
    ("tools",), ("tools", 0), ("tools", 0, "functionDeclarations"), ("tools", 0, "functionDeclarations", 0),
    *(("tools", 0, "functionDeclarations", 0, name) for name in ("name", "parameters", "description")),
    ("generationConfig",), *(("generationConfig", name) for name in (
        "maxOutputTokens", "candidateCount", "responseMimeType", "responseSchema")),
    ("toolConfig",), ("toolConfig", "functionCallingConfig"), ("toolConfig", "functionCallingConfig", "mode")]
#: Each dialect: its path under the proxy's root, a valid body, and the fields to spoil.
DIALECTS = {"chat": ("/v1/chat/completions", VALID, FIELDS), "messages": ("/v1/messages", MESSAGES, MESSAGES_FIELDS),
            "responses": ("/v1/responses", RESPONSES, RESPONSES_FIELDS),
            "generate": ("/v1beta/models/tiny:generateContent", GENERATE, GENERATE_FIELDS)}


@pytest.fixture(scope="module")
def proxy() -> Iterator[CaptureProxy]:
    with CaptureProxy(InstantEngine(tiny_echo().tokenizer), max_request_bytes=2**20) as proxy:
        yield proxy


def with_value(valid: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    body = copy.deepcopy(valid)
    if valid is VALID and path[:3] == ("messages", 1, "content"):
        body["messages"][1]["content"] = [{"type": "text", "text": "hi"}]
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return body


def check_answer(answer: httpx.Response) -> None:
    assert answer.status_code < 500, answer.text
    if answer.status_code != 200:
        assert 400 <= answer.status_code < 500
        error = answer.json()["error"]
        assert error["message"] and "\n" not in error["message"] and "Traceback" not in answer.text


def raw_post(proxy: CaptureProxy, session: CaptureSession, head: dict[str, str], chunks: Iterator[bytes]
             ) -> tuple[int, bytes]:
    """POST `chunks` as the body with `head`'s extra headers on a raw socket; the status and the answer's bytes."""
    assert proxy.url is not None
    port = int(proxy.url.split(":")[2].split("/")[0])
    with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
        lines = ["POST /v1/chat/completions HTTP/1.1", "Host: proxy", f"Authorization: Bearer {session.api_key}",
                 "Content-Type: application/json", *(f"{name}: {value}" for name, value in head.items())]
        connection.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        try:
            for chunk in chunks:
                connection.sendall(chunk)
        except OSError:    # the proxy answered and closed before the whole body was sent
            pass
        answer = b""
        while b"\r\n\r\n" not in answer or len(answer) < answer.index(b"\r\n\r\n") + 4 + int(
                answer.split(b"content-length: ")[1].split(b"\r\n")[0]):
            data = connection.recv(65536)
            if not data:
                break
            answer += data
    return int(answer.split(b" ")[1]), answer


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_every_field_of_every_json_type_gets_a_4xx_or_an_answer(proxy: CaptureProxy, dialect: str) -> None:
    path, valid, fields = DIALECTS[dialect]
    session = proxy.open_session(max_calls=10_000)
    refused = 0
    assert proxy.url is not None
    with httpx.Client(base_url=proxy.url.removesuffix("/v1"), trust_env=False, timeout=60,
                      headers={"Authorization": f"Bearer {session.api_key}"}) as http:
        assert http.post(path, json=valid).status_code == 200
        for field in fields:
            for value in VALUES:
                body = json.dumps(with_value(valid, field, value))   # lone surrogates go as \ud800 escapes
                answer = http.post(path, content=body, headers={"content-type": "application/json"})
                check_answer(answer)
                refused += answer.status_code != 200
        for body in ['{"messages": [{"role": "user", "content": "\\udc00 alone"}]}', "[" * 100_000 + "]" * 100_000,
                     '{"messages": [{"role": "user", "content": "hi"}]', "\xff\xfe", "null", '"text"', "{}"]:
            answer = http.post(path, content=body.encode(errors="surrogateescape"))
            check_answer(answer)
            assert answer.status_code == 400
        assert http.post(path, json=valid).status_code == 200     # the proxy carries on
    assert refused > len(fields) * 3


def test_lone_and_paired_surrogates(proxy: CaptureProxy) -> None:
    session = proxy.open_session(max_calls=2)
    with httpx.Client(base_url=proxy.url, trust_env=False, headers={"Authorization": f"Bearer {session.api_key}"}
                      ) as http:
        lone = http.post("/chat/completions", content=b'{"messages": [{"role": "user", "content": "a\\ud800"}]}')
        paired = http.post("/chat/completions",
                           content=b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}')
    assert lone.status_code == 400 and "surrogate" in lone.json()["error"]["message"]
    assert paired.status_code == 200 and session.calls == 1


def test_bodies_past_the_limit_are_refused_unread(proxy: CaptureProxy) -> None:
    """Declared (Content-Length) or chunked, a body past `max_request_bytes` gets 413; a 200 MB one, chunked,
    is refused without the proxy holding it."""
    session = proxy.open_session(max_calls=4)
    status, answer = raw_post(proxy, session, {"Content-Length": str(200 * 2**20)}, iter([b"{" * 2**20]))
    assert status == 413 and b"max_request_bytes" in answer
    with open("/proc/self/clear_refs", "w") as refs:   # the peak resident memory starts again from here
        refs.write("5")
    before = resident_kib("VmRSS")
    megabyte = b'"' + b"x" * (2**20 - 2) + b'"'
    chunked = (f"{len(megabyte):x}\r\n".encode() + megabyte + b"\r\n" for _ in range(200))
    status, answer = raw_post(proxy, session, {"Transfer-Encoding": "chunked"}, chunked)
    assert status == 413 and b"\n" not in json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["message"].encode()
    assert resident_kib("VmHWM") - before < 256 * 1024
    with httpx.Client(base_url=proxy.url, trust_env=False) as http:
        fine = http.post("/chat/completions", json=VALID, headers={"Authorization": f"Bearer {session.api_key}"})
    assert fine.status_code == 200 and session.calls == 1


def resident_kib(field: str) -> int:
    """`field` of /proc/self/status (VmRSS: resident now; VmHWM: the peak), in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


class CountingTokenizer:
    """The tiny tokenizer, noting the longest text it was asked to tokenise."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.longest = 0

    def __call__(self, text: str, **options: Any) -> Any:
        self.longest = max(self.longest, len(text))
        return self.inner(text, **options)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_conversation_past_the_context_is_refused_before_it_is_tokenised() -> None:
    tokenizer = CountingTokenizer(tiny_echo().tokenizer)
    with CaptureProxy(InstantEngine(tokenizer), max_context=1024) as proxy:
        session = proxy.open_session(max_calls=2)
        with httpx.Client(base_url=proxy.url, trust_env=False, timeout=60,
                          headers={"Authorization": f"Bearer {session.api_key}"}) as http:
            answer = http.post("/chat/completions", json={"messages": [{"role": "user", "content": "x" * 2_000_000}]})
            assert answer.status_code == 400 and answer.json()["error"]["code"] == "context_length_exceeded"
            assert "context 1024:" in answer.json()["error"]["message"]
            assert tokenizer.longest < 1000 and session.calls == 0
            assert http.post("/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
                             ).status_code == 200
