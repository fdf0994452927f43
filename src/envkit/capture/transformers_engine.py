"""`TransformersEngine`: samples from a transformers model object in this process, the trainer's own.

It holds the model, not a copy: after an optimizer step the next call samples from the new weights. A batch is
generated as one left-padded `generate` per distinct sampling policy, in a worker thread (the proxy's event loop
keeps answering meanwhile). Each sampled token's log-probability is taken from the model's raw logits divided by
the temperature: the full-vocabulary policy a trainer recomputes (`top_k` is off, so only `top_p` < 1 narrows
what is drawn from).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Sequence

from .engine import Generation, GenerationRequest, Sampling

__all__ = ["TransformersEngine"]


class TransformersEngine:
    """An engine over `model` (a transformers causal LM) and its `tokenizer` (with a chat template).

    `chat_template_kwargs`: variables for the chat template (the tiny model: `{"enable_thinking": False}`, its
    default when the tokenizer's template is Qwen3's); `model_name`: the id `/v1/models` lists."""

    def __init__(self, model: Any, tokenizer: Any, *, model_name: str | None = None,
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        if tokenizer.eos_token_id is None or tokenizer.pad_token_id is None:
            raise ValueError("TransformersEngine needs a tokenizer with an end-of-turn (eos) and a padding token")
        self.model = model
        self.tokenizer = tokenizer
        self.model_name = model_name or getattr(model.config, "name_or_path", "") or type(model).__name__
        self.max_context: int | None = getattr(model.config, "max_position_embeddings", None)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._lock = threading.Lock()

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return await asyncio.to_thread(self.generate_now, requests)

    def generate_now(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """`generate`, in the calling thread."""
        groups: dict[Sampling, list[int]] = {}
        for index, request in enumerate(requests):
            groups.setdefault(request.sampling, []).append(index)
        results: list[Generation | None] = [None] * len(requests)
        with self._lock:
            for sampling, indices in groups.items():
                for index, result in zip(indices, self._generate_group([requests[i].prompt_ids for i in indices],
                                                                       sampling), strict=True):
                    results[index] = result
        return [result for result in results if result is not None]

    def _generate_group(self, prompts: list[list[int]], sampling: Sampling) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        width = max(len(prompt) for prompt in prompts)
        device = next(self.model.parameters()).device
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        ids = torch.full((len(prompts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(prompts), width), dtype=torch.long)
        for row, prompt in enumerate(prompts):   # left padding: every prompt ends where generation starts
            ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention[row, width - len(prompt):] = 1
        config = GenerationConfig(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p, top_k=0,
                                  max_new_tokens=sampling.max_tokens, eos_token_id=eos, pad_token_id=pad,
                                  output_logits=True, return_dict_in_generate=True)
        if sampling.seed is not None:
            torch.manual_seed(sampling.seed)
        with torch.no_grad():
            output = self.model.generate(input_ids=ids.to(device), attention_mask=attention.to(device),
                                         generation_config=config)
        sampled = output.sequences[:, width:].cpu()
        logits = torch.stack(output.logits, dim=1).float().cpu() / sampling.temperature
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)
        results = []
        for row in range(len(prompts)):
            tokens = sampled[row].tolist()
            stopped = eos in tokens
            length = tokens.index(eos) + 1 if stopped else len(tokens)
            results.append(Generation(completion_ids=tokens[:length], logprobs=chosen[row, :length].tolist(),
                                      finish_reason="stop" if stopped else "length"))
        return results
