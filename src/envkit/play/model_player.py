"""A local model (transformers) as a player, generating exactly as TRL's `GRPOTrainer` does in training.

The same pieces, in the same order (TRL 1.16, `GRPOTrainer._tokenize_prompts`, `_tool_call_loop`):

- the tokenizer gets TRL's response template for its chat template (`add_response_schema`) when it
  has none, and a prefix-preserving training template (`get_training_chat_template`) when its own
  is not prefix-preserving;
- the prompt is rendered with `apply_chat_template(tools=<the bound methods>, add_generation_prompt=True,
  **chat_template_kwargs)`;
- after tool calls, the tool messages are tokenised on their own (the part a dummy conversation
  with those tool messages adds, from the end-of-turn token on) and appended to the token ids
  generated so far: nothing is re-tokenised;
- `max_completion_length` bounds the whole episode after the prompt, tool tokens included: tool
  results that would pass it are dropped and the episode ends; a generation is cut at it;
- each answer is parsed with TRL's `parse_response` (tool calls typed by the tools' schemas).

Decoding is greedy unless a temperature is given.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .loop import Conversation

__all__ = ["TokenPlayer", "ModelPlayer"]


class TokenPlayer:
    """Keeps each conversation as token ids, as TRL does, and generates for a batch of them at once.

    Each conversation's `state` holds `prompt_ids`, `completion_ids` (everything after the prompt, tool tokens
    included), `mask` (1 for a generated token, 0 for a tool token) and, when the generator reports them,
    `logprobs` (0.0 for tool tokens). Subclasses say how to generate (`_generate`).
    """

    def __init__(self, label: str, tokenizer: Any, *, chat_template: str | None, chat_template_kwargs: dict[str, Any],
                 max_completion_length: int, max_model_length: int) -> None:
        self.label = label
        self.tokenizer = tokenizer
        self.chat_template = chat_template
        self.chat_template_kwargs = dict(chat_template_kwargs)
        self.max_completion_length = max_completion_length
        self.max_model_length = max_model_length

    def respond(self, conversations: Sequence[Conversation]) -> list[dict[str, Any] | None]:
        inputs: list[list[int] | None] = [self._input_ids(conversation) for conversation in conversations]
        live = [index for index, ids in enumerate(inputs) if ids is not None]
        answers: list[dict[str, Any] | None] = [None] * len(conversations)
        if not live:
            return answers
        budgets = [self.max_completion_length - (len(inputs[index]) - len(conversations[index].state["prompt_ids"]))
                   for index in live]
        generated, logprobs = self._generate([inputs[index] for index in live], max(budgets))
        from trl.chat_template_utils import parse_response

        for position, (index, new_ids, budget) in enumerate(zip(live, generated, budgets, strict=True)):
            conversation, input_ids = conversations[index], inputs[index]
            new_ids = new_ids[:budget]
            state = conversation.state
            tool_length = len(input_ids) - len(state["prompt_ids"]) - len(state["completion_ids"])
            state["completion_ids"] = input_ids[len(state["prompt_ids"]):] + new_ids
            state["mask"] += [0] * tool_length + [1] * len(new_ids)
            if logprobs is not None:
                state.setdefault("logprobs", []).extend([0.0] * tool_length + logprobs[position][:budget])
            if new_ids:
                answers[index] = parse_response(self.tokenizer, new_ids, prefix=input_ids, tools=conversation.tools)
        return answers

    def _generate(self, batch: list[list[int]], max_new_tokens: int
                  ) -> tuple[list[list[int]], list[list[float]] | None]:
        """One generation for every sequence of `batch`: the new ids of each (ending at its end-of-sequence token,
        kept), and their log-probabilities when the generator reports them."""
        raise NotImplementedError

    def _input_ids(self, conversation: Conversation) -> list[int] | None:
        """The ids to generate from: the prompt, or everything so far plus the new tool messages (None when
        those would pass the episode's budget or the model's context; then they are dropped, as TRL does)."""
        state = conversation.state
        if "prompt_ids" not in state:
            rendered = self.tokenizer.apply_chat_template(
                conversation=[conversation.messages], tools=conversation.tools or None,
                chat_template=self.chat_template, add_generation_prompt=True, tokenize=True, return_dict=True, **self.chat_template_kwargs)
            state["prompt_ids"], state["completion_ids"], state["mask"] = list(rendered["input_ids"][0]), [], []
            return state["prompt_ids"]
        tool_messages = []
        for message in reversed(conversation.messages):
            if message["role"] != "tool":
                break
            tool_messages.insert(0, message)
        ids = state["prompt_ids"] + state["completion_ids"] + self._tool_suffix_ids(tool_messages)
        if len(ids) - len(state["prompt_ids"]) > self.max_completion_length or len(ids) >= self.max_model_length:
            del conversation.messages[len(conversation.messages) - len(tool_messages):]
            return None
        return ids

    def _tool_suffix_ids(self, tool_messages: list[dict[str, Any]]) -> list[int]:
        """The tokens that tool messages add after an assistant turn, up to the next generation prompt."""
        calls = [{"type": "function", "function": {"name": tool_messages[0]["name"], "arguments": {}}}]
        dummy = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "", "tool_calls": calls}]
        options = {"tokenize": True, "chat_template": self.chat_template, "return_dict": False,
                   **self.chat_template_kwargs}
        prefix = list(self.tokenizer.apply_chat_template(dummy, add_generation_prompt=False, **options))
        full = list(self.tokenizer.apply_chat_template(dummy + tool_messages, add_generation_prompt=True, **options))
        ends = [position for position, token in enumerate(prefix) if token == self.tokenizer.eos_token_id]
        if ends:
            prefix = prefix[: ends[-1] + 1]
        if full[: len(prefix)] != prefix:
            raise ValueError("the chat template renders an assistant turn differently when tool messages follow it; "
                             "it cannot be used for multi-turn tool calling")
        return full[len(prefix):]


class ModelPlayer(TokenPlayer):
    """Generates for a batch of conversations at once with `model.generate` (left-padded)."""

    def __init__(self, label: str, model: Any, tokenizer: Any, *, max_completion_length: int,
                 chat_template_kwargs: dict[str, Any] | None = None, temperature: float = 0.0) -> None:
        from trl.chat_template_utils import add_response_schema, get_training_chat_template, \
            is_chat_template_prefix_preserving

        if all(getattr(tokenizer, name, None) is None for name in ("response_template", "response_schema")):
            tokenizer = add_response_schema(tokenizer)
        super().__init__(label, tokenizer, chat_template=(None if is_chat_template_prefix_preserving(tokenizer)
                                                          else get_training_chat_template(tokenizer)),
                         chat_template_kwargs=chat_template_kwargs or {}, max_completion_length=max_completion_length,
                         max_model_length=int(getattr(model.config, "max_position_embeddings", 1 << 30)))
        self.model = model
        self.temperature = temperature
        eos = model.generation_config.eos_token_id
        self.eos_token_ids = [eos] if isinstance(eos, int) else list(eos or [tokenizer.eos_token_id])

    def _generate(self, batch: list[list[int]], max_new_tokens: int) -> tuple[list[list[int]], None]:
        """Generate for every sequence at once; each result ends at its first end-of-sequence token (kept)."""
        import torch

        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        width = max(len(ids) for ids in batch)
        input_ids = torch.tensor([[pad] * (width - len(ids)) + ids for ids in batch], device=self.model.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in batch], device=self.model.device)
        sampling: dict[str, Any] = ({"do_sample": True, "temperature": self.temperature} if self.temperature > 0
                                    else {"do_sample": False, "temperature": None, "top_p": None, "top_k": None})
        with torch.no_grad():
            output = self.model.generate(input_ids=input_ids, attention_mask=attention,
                                         max_new_tokens=max(1, max_new_tokens), eos_token_id=self.eos_token_ids,
                                         pad_token_id=pad, **sampling)
        results = []
        for row in output[:, width:].tolist():
            ends = [position for position, token in enumerate(row) if token in self.eos_token_ids]
            results.append(row[: ends[0] + 1] if ends else row)
        return results, None
