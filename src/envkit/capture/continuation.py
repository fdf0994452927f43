"""The prompt's token ids for a call: the sampled ids reused exactly, only the new part tokenised.

A call continues an earlier one (its parent) when its messages are the parent's messages, then the assistant
message the proxy answered the parent with, then new messages (tool results, a user turn), with the same tools.
Its prompt is then the parent's prompt ids + the parent's completion ids + the tokens of the new part's text.
Nothing the model sampled is tokenised again: re-rendering a conversation as text does not give back the ids
that were sampled (Qwen3's template drops the empty thinking block of an earlier turn, a model may space its
tool-call JSON unlike the template, and sampled ids need not be the tokenizer's own split of their text).

The new part's text is found in the conversation rendered with a placeholder in the parent's reply: it begins
at the first end-of-turn marker (the tokenizer's eos text) after the placeholder, so no text a message holds (the
marker itself, tool-call markup, template fragments) can move the cut. The history before the parent's turn must
render as it did in the parent's prompt (its text is kept on the call), and the conversation rendered with the
real reply must hold the same history and the same new part (checked); when it does not, or when nothing extends an earlier
call (a rewritten history), the call starts a new root, tokenised whole, with its reason.
"""

from __future__ import annotations

import functools
import secrets
from dataclasses import dataclass
from typing import Any, Sequence

from .chat import ChatRequest, RequestError, for_template, message_key, tools_key
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
        """The conversation as the chat template renders it (`RequestError` when the template refuses it)."""
        try:
            return self.tokenizer.apply_chat_template([for_template(message) for message in messages], tools=tools,
                                                      add_generation_prompt=generation, tokenize=False, **self.kwargs)
        except Exception as error:   # a template raises on messages it cannot render; the caller's to fix
            reason = " ".join(f"{type(error).__name__}: {error}".split())[:300]
            raise RequestError(f"the chat template cannot render these messages ({reason}); check their fields",
                               code="unrenderable_messages") from None

    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    @functools.cached_property
    def longest_token(self) -> int:
        """The most characters of text one token stands for (its vocabulary string's length, at least)."""
        return max(map(len, self.tokenizer.get_vocab()), default=1) or 1

    def at_least(self, text: str) -> int:
        """A lower bound on the tokens of `text`, without tokenising it."""
        return -(-len(text) // self.longest_token)

    def decode(self, ids: Sequence[int]) -> str:
        """Sampled ids as text, the end-of-turn token left out."""
        if ids and ids[-1] == self.eos_id:
            ids = ids[:-1]
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)


@dataclass(frozen=True)
class Prompt:
    """A call's prompt: its token ids, the earlier call it continues (None: a new root), how many tokens were
    tokenised for it, its rendered text, and why it is a root when an earlier call's messages matched (else
    None)."""

    ids: list[int]
    parent: Call | None
    new_tokens: int
    #: The conversation as the chat template renders it, with the generation prompt (a continuation's history).
    text: str = ""
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


def _placeholder(rendered: str) -> str:
    """A text that `rendered` (the conversation with every message and tool) does not hold."""
    while True:
        mark = f"envkit{secrets.token_hex(8)}"
        if mark not in rendered:
            return mark


def _new_part(renderer: Renderer, request: ChatRequest, parent: Call, whole: str) -> str | None:
    """The text after the parent's reply in the conversation rendered whole, from its end-of-turn marker on
    (None when the history renders otherwise than in the parent's prompt, or the new part otherwise once the real
    reply is in place)."""
    eos = renderer.eos_text
    turn = len(parent.message_keys)
    mark = _placeholder(whole)
    stand_in = [*request.messages[:turn], {"role": "assistant", "content": mark}, *request.messages[turn + 1:]]
    masked = renderer.render(stand_in, request.tools, generation=True)
    # The history is the parent's prompt up to its last marker (what follows is the generation prompt); the
    # reply's turn ends at the first marker after the placeholder: no marker a message writes is counted.
    end, reply = parent.prompt_text.rfind(eos), masked.find(mark)
    cut = masked.find(eos, reply + len(mark)) if reply >= 0 else -1
    if end < 0 or cut < 0:
        return None
    history = parent.prompt_text[: end + len(eos)]
    if not masked.startswith(history) or not whole.startswith(history) or not whole.endswith(masked[cut:]):
        return None
    return masked[cut:]


def _check_size(renderer: Renderer, text: str, known: int, limit: int | None) -> None:
    """`RequestError` when `known` tokens and `text` cannot fit in `limit` tokens, told before tokenising `text`."""
    if limit is not None and known + renderer.at_least(text) >= limit:
        raise RequestError(f"the conversation is at least {known + renderer.at_least(text)} tokens and the model's "
                           f"context {limit}: no room to answer; start a shorter one", code="context_length_exceeded")


def build_prompt(renderer: Renderer, request: ChatRequest, earlier: Sequence[Call], *,
                 max_tokens: int | None = None) -> Prompt:
    """The prompt ids for `request`, continuing the earlier call it extends when there is one; `RequestError`
    when the prompt cannot leave room for one sampled token in `max_tokens`, told before tokenising it whole."""
    whole = renderer.render(request.messages, request.tools, generation=True)
    parent = _parent(request, earlier)
    new = _new_part(renderer, request, parent, whole) if parent is not None else None
    if parent is None or new is None:
        _check_size(renderer, whole, 0, max_tokens)
        ids = renderer.tokenize(whole)
        return Prompt(ids=ids, parent=None, new_tokens=len(ids), text=whole, root_reason=None if parent is None else (
            "the chat template renders the history before the last reply differently once new messages follow it"))
    if parent.completion_ids and parent.completion_ids[-1] == renderer.eos_id:
        new = new[len(renderer.eos_text):]   # the sampled ids end the turn; the template's marker is not new
    _check_size(renderer, new, len(parent.prompt_ids) + len(parent.completion_ids), max_tokens)
    new_ids = renderer.tokenize(new)
    return Prompt(ids=[*parent.prompt_ids, *parent.completion_ids, *new_ids], parent=parent, new_tokens=len(new_ids),
                  text=whole)
