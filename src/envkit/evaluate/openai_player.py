"""A model behind an OpenAI-compatible chat server (`vllm serve`, `transformers serve`, a hosted API) as a player.

Each turn is one `POST {url}/chat/completions` with the conversation so far and the environment's
tools (`tools=`, the schemas the server's `/tools` lists, which are those TRL renders); the server
applies its chat template and parses tool calls. Requests of different games run in parallel.
The key, if the server wants one, comes from `OPENAI_API_KEY`.

A server that cannot be reached, or refuses a request (4xx: a wrong model name, a missing key), stops
the evaluation with `ChatServerError`. A server error (5xx) on one turn ends that game only: it
counts as a failed call and the transcript keeps the error on an empty assistant message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from ..errors import EnvkitError
from ..play.loop import Conversation

__all__ = ["OpenAIPlayer", "ChatServerError"]


class ChatServerError(EnvkitError):
    """The chat server could not be reached, or refused a request."""


class OpenAIPlayer:
    """Chat completions over HTTP; greedy (`temperature` 0) unless told otherwise."""

    def __init__(self, base_url: str, model: str, listings: Mapping[str, Sequence[dict[str, Any]]], *,
                 max_tokens: int, temperature: float = 0.0, timeout_s: float = 300.0,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.label = model
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.listings = listings
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        key = os.environ.get("OPENAI_API_KEY")
        self.http = httpx.Client(timeout=timeout_s, trust_env=False,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})

    def close(self) -> None:
        self.http.close()

    def respond(self, conversations: Sequence[Conversation]) -> list[dict[str, Any] | None]:
        with ThreadPoolExecutor(max_workers=min(32, max(1, len(conversations)))) as pool:
            return list(pool.map(self._answer, conversations))

    def _answer(self, conversation: Conversation) -> dict[str, Any] | None:
        body: dict[str, Any] = {"model": self.model, "messages": openai_messages(conversation.messages),
                                "tools": list(self.listings[conversation.game.env]), "temperature": self.temperature,
                                "max_tokens": self.max_tokens, "stream": False}
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        try:
            response = self.http.post(self.url, json=body)
        except httpx.HTTPError as error:
            raise ChatServerError(f"cannot reach the chat server at {self.url}: {type(error).__name__}: {error}; "
                                  "is it running, and is --openai-url its /v1 root?") from None
        if response.status_code >= 500:
            # The server failed on this conversation (e.g. `transformers serve` on a malformed tool call): this game
            # ends here, counted as a failed call; the others go on.
            conversation.failed_calls += 1
            conversation.messages.append({"role": "assistant", "content": "", "error": f"the chat server answered "
                                          f"HTTP {response.status_code}: {response.text[:200]}"})
            return None
        if response.status_code != 200:
            raise ChatServerError(f"the chat server at {self.url} answered HTTP {response.status_code}: "
                                  f"{response.text[:300]}")
        try:
            message = response.json()["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ChatServerError(f"the chat server at {self.url} sent no chat completion: {response.text[:300]}") \
                from None
        answer: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        calls = [_parsed_call(call) for call in message.get("tool_calls") or []]
        if calls:
            answer["tool_calls"] = calls
        return answer


def _parsed_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A server's tool call (arguments as JSON text) in TRL's shape (arguments as an object when they parse)."""
    function = call.get("function") or {}
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass  # left as text: calling the tool with it fails, and the model reads why
    return {"type": call.get("type", "function"), "function": {"name": function.get("name"), "arguments": arguments}}


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The conversation in the chat API's shape: tool calls with ids and JSON arguments, tool messages naming them."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for turn, message in enumerate(messages):
        role = message["role"]
        if role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
            calls = message.get("tool_calls") or []
            if calls:
                pending = [f"call_{turn}_{number}" for number in range(len(calls))]
                item["tool_calls"] = [
                    {"id": ident, "type": "function",
                     "function": {"name": call["function"]["name"],
                                  "arguments": call["function"]["arguments"]
                                  if isinstance(call["function"]["arguments"], str)
                                  else json.dumps(call["function"]["arguments"])}}
                    for ident, call in zip(pending, calls, strict=True)]
            out.append(item)
        elif role == "tool":
            ident = pending.pop(0) if pending else f"call_{turn}"
            out.append({"role": "tool", "tool_call_id": ident, "name": message.get("name"),
                        "content": message.get("content", "")})
        else:
            out.append({"role": role, "content": message.get("content", "")})
    return out
