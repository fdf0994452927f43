"""The prompt's token ids for a call: the sampled ids reused exactly, only the new part tokenised.

A call continues an earlier one (its parent) when its messages are the parent's messages, then the assistant
message the proxy answered the parent with, then new messages (tool results, a user turn), with the same tools.
Its prompt is then the parent's prompt ids + the parent's completion ids + the tokens of the new part's text.
Nothing the model sampled is tokenised again: re-rendering a conversation as text does not give back the ids
that were sampled (Qwen3's template drops the empty thinking block of an earlier turn, a model may space its
tool-call JSON unlike the template, and sampled ids need not be the tokenizer's own split of their text).

The new part's text is found in the conversation rendered whole: it begins where the parent's turn ends, after
as many end-of-turn markers (the tokenizer's eos text) as the conversation up to the parent's reply holds. The
rendering before the parent's turn must be the same both ways (checked); when it is not, or when nothing extends
an earlier call (a rewritten history), the call starts a new root, tokenised whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .chat import ChatRequest, for_template, message_key, tools_key
from .records import Call

__all__ = ["Renderer", "Prompt", "build_prompt"]


class Renderer:
    """Renders conversations with a tokenizer's chat template and tokenises text."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.eos_text: str = tokenizer.eos_token
        self.eos_id: int = tokenizer.eos_token_id

    def render(self, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None, *,
               generation: bool) -> str:
        return self.tokenizer.apply_chat_template([for_template(message) for message in messages], tools=tools,
                                                  add_generation_prompt=generation, tokenize=False, **self.kwargs)

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, ids: Sequence[int]) -> str:
        """Sampled ids as text, the end-of-turn token left out."""
        if ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


@dataclass(frozen=True)
class Prompt:
    """A call's prompt: its token ids, the earlier call it continues (None: a new root), how many tokens were
    tokenised for it, and why it is a root when an earlier call's messages matched (else None)."""

    ids: list[int]
    parent: Call | None
    new_tokens: int
    root_reason: str | None = None


def _parent(request: ChatRequest, earlier: Sequence[Call]) -> Call | None:
    """The earlier call this request extends, the one with the longest history (the latest on a tie)."""
    keys = [message_key(message) for message in request.messages]
    tools = tools_key(request.tools)
    best: Call | None = None
    for call in earlier:
        size = len(call.message_keys)
        if (len(keys) > size + 1 and call.tools_key == tools and keys[:size] == call.message_keys
                and keys[size] == call.reply_key and (best is None or size >= len(best.message_keys))):
            best = call
    return best


def _end_of_marker(text: str, marker: str, count: int) -> int:
    """The index just past the `count`-th occurrence of `marker` in `text` (-1 when there are fewer)."""
    position = 0
    for _ in range(count):
        found = text.find(marker, position)
        if found < 0:
            return -1
        position = found + len(marker)
    return position


def build_prompt(renderer: Renderer, request: ChatRequest, earlier: Sequence[Call]) -> Prompt:
    """The prompt ids for `request`, continuing the earlier call it extends when there is one."""
    whole = renderer.render(request.messages, request.tools, generation=True)
    parent = _parent(request, earlier)
    if parent is None:
        ids = renderer.tokenize(whole)
        return Prompt(ids=ids, parent=None, new_tokens=len(ids))
    turn = len(parent.message_keys)
    upto = renderer.render(request.messages[: turn + 1], request.tools, generation=False)
    markers = upto.count(renderer.eos_text)
    before = _end_of_marker(upto, renderer.eos_text, markers - 1) if markers else -1
    cut = _end_of_marker(whole, renderer.eos_text, markers) if markers else -1
    if before < 0 or cut < 0 or whole[:before] != upto[:before]:
        ids = renderer.tokenize(whole)
        return Prompt(ids=ids, parent=None, new_tokens=len(ids),
                      root_reason="the chat template renders the history before the last reply differently once "
                                  "new messages follow it")
    if not parent.completion_ids or parent.completion_ids[-1] != renderer.eos_id:
        cut -= len(renderer.eos_text)   # cut off before its end of turn: the template's marker is new context
    new = renderer.tokenize(whole[cut:])
    return Prompt(ids=[*parent.prompt_ids, *parent.completion_ids, *new], parent=parent, new_tokens=len(new))
