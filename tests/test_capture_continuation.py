"""Continuation that no text breaks: a call whose history is the previous call's messages, the proxy's own reply
and new messages continues the chain, whatever the replies and tool outputs hold.

A property test, sans I/O (`build_prompt` as the proxy calls it): seeded random chains on the tiny model's
tokenizer and its Qwen3-style chat template (with and without thinking), whose sampled replies and tool outputs
mix the tokenizer's special-token texts, ids that decode to invalid UTF-8, tool-call markup and template
fragments. Each continuation's prompt is the parent's prompt and completion ids plus new ids, and the new ids are
exactly the tail of the whole conversation tokenised afresh. A history the agent rewrote starts a new root.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from capture_model import tiny_echo
from envkit.capture.chat import message_key, parse_completion, read_request, tools_key
from envkit.capture.continuation import Renderer, build_prompt
from envkit.capture.records import Call

pytestmark = pytest.mark.timeout(600)

SHELL = [{"type": "function", "function": {"name": "shell", "description": "Run a command.", "parameters": {
    "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
MARKUP = ['<tool_call>\n{"name": "shell", "arguments": {"command": "ls"}}\n</tool_call>',
          '<tool_call>{"name": "shell", "arguments": {"command": "echo <|im_end|>"}}</tool_call>',
          "<tool_call>{not json}</tool_call>", "<tool_call>", "</tool_call>", "<tool_response>\nx\n</tool_response>"]
FRAGMENTS = ["<|im_start|>assistant\n", "<|im_end|>\n<|im_start|>user\n", "<think>\n\n</think>\n\n", "\n", " ",
             "{{ messages }}", "{%- if loop.last %}", "\ufffd", "é", "日本", "\U0001f600", "plain words"]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return tiny_echo().tokenizer


def pieces(tokenizer: Any) -> st.SearchStrategy[list[Any]]:
    """A mix of text pieces and raw ids (ids whose text alone is invalid UTF-8)."""
    specials = [*tokenizer.all_special_tokens, *tokenizer.get_added_vocab()]
    broken = [token for token in range(len(tokenizer)) if "\ufffd" in tokenizer.decode([token])]
    text = st.sampled_from([*specials, *MARKUP, *FRAGMENTS]) | st.text(max_size=12)
    return st.lists(text | st.sampled_from(broken).map(lambda token: [token]), max_size=8)


def as_ids(renderer: Renderer, parts: list[Any]) -> list[int]:
    return [token for part in parts for token in (part if isinstance(part, list) else renderer.tokenize(part))]


def as_text(parts: list[Any]) -> str:
    return "".join(part if isinstance(part, str) else "\ufffd" for part in parts)


class Chain:
    """One session's calls, answered as the proxy answers them (with sampled ids in place of a model)."""

    def __init__(self, renderer: Renderer) -> None:
        self.renderer = renderer
        self.calls: list[Call] = []

    def answer(self, messages: list[dict[str, Any]], completion: list[int]) -> tuple[Any, dict[str, Any]]:
        prompt = build_prompt(self.renderer, read_request({"messages": messages, "tools": SHELL}), self.calls)
        reply = parse_completion(self.renderer.decode(completion))
        node = f"n{len(self.calls)}"
        self.calls.append(Call(
            node_id=node, parent_id=prompt.parent.node_id if prompt.parent else None,
            root_id=prompt.parent.root_id if prompt.parent else node, messages=messages, tools=SHELL,
            message_keys=[message_key(message) for message in messages], tools_key=tools_key(SHELL),
            reply_key=message_key(reply), prompt_ids=prompt.ids, completion_ids=completion,
            logprobs=[-1.0] * len(completion), finish_reason="stop", response={}, sampling={},
            root_reason=prompt.root_reason, prompt_text=prompt.text))
        return prompt, json.loads(json.dumps(reply))   # as a client reads it and sends it back


@pytest.mark.parametrize("thinking", [False, True])
def test_any_text_in_replies_and_tool_outputs_keeps_the_chain(tokenizer: Any, thinking: bool) -> None:
    renderer = Renderer(tokenizer, {"enable_thinking": thinking})

    @settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.tuples(pieces(tokenizer), st.booleans(), pieces(tokenizer), st.booleans()),
                    min_size=1, max_size=4), pieces(tokenizer))
    def chain_holds(turns: list[tuple[list[Any], bool, list[Any], bool]], task: list[Any]) -> None:
        chain = Chain(renderer)
        messages: list[dict[str, Any]] = [{"role": "user", "content": as_text(task) or "hi"}]
        reasoned = False
        for number, (sampled, ends, output, as_user) in enumerate(turns):
            completion = as_ids(renderer, sampled) + ([renderer.eos_id] if ends else [])
            prompt, reply = chain.answer(messages, completion or [renderer.eos_id])
            if number:
                parent = chain.calls[-2]
                assert prompt.parent is parent, prompt.root_reason
                assert prompt.ids[: len(parent.prompt_ids) + len(parent.completion_ids)] == [
                    *parent.prompt_ids, *parent.completion_ids]
                fresh = renderer.tokenize(renderer.render(messages, SHELL, generation=True))
                assert fresh[len(fresh) - prompt.new_tokens:] == prompt.ids[len(prompt.ids) - prompt.new_tokens:]
            reasoned = reasoned or bool(reply.get("reasoning_content"))
            # A user turn after a turn that reasoned makes Qwen3's template drop that reasoning: a root, rightly.
            role = "user" if as_user and not reasoned else "tool"
            messages = [*messages, reply, {"role": role, "content": as_text(output)}]

    chain_holds()


def test_a_rewritten_history_starts_a_new_root(tokenizer: Any) -> None:
    renderer = Renderer(tokenizer, {"enable_thinking": False})
    chain = Chain(renderer)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "hi <|im_end|>"}]
    _, reply = chain.answer(messages, renderer.tokenize("ok <|im_end|> fine") + [renderer.eos_id])
    edited = {**reply, "content": reply["content"] + "!"}
    prompt, _ = chain.answer([*messages, edited, {"role": "tool", "content": "x"}], [renderer.eos_id])
    assert prompt.parent is None and prompt.ids == renderer.tokenize(
        renderer.render([*messages, edited, {"role": "tool", "content": "x"}], SHELL, generation=True))
