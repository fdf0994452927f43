"""`Call`: one model call as the engine served it, the record a session keeps and a trace is made of."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call"]


@dataclass
class Call:
    """One model call as the engine served it."""

    node_id: str
    parent_id: str | None
    root_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    message_keys: list[tuple[Any, ...]]
    tools_key: str
    reply_key: tuple[Any, ...]
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    response: dict[str, Any]
    sampling: dict[str, Any]
    requested_sampling: dict[str, Any] = field(default_factory=dict)
    #: Prompt tokens tokenised for this call (all of them for a root; the new messages' for a continuation).
    new_prompt_tokens: int = 0
    #: Why the call is a root although it extends an earlier call's messages (None otherwise).
    root_reason: str | None = None
    #: The conversation as the chat template rendered it for this call (the next call's history is checked on it).
    prompt_text: str = ""
