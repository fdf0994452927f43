"""What the proxy asks of an engine: token ids in, sampled token ids and their log-probabilities out.

The proxy owns the prompt's token ids (it renders and tokenises only the new part of a conversation and reuses
the ids it sampled before, `continuation`), so every engine takes token ids, never text or chat messages. An
engine serves many sessions at once: `generate` takes a batch of requests (`Batcher` gathers them) and answers
each in order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

__all__ = ["Sampling", "GenerationRequest", "Generation", "Engine", "EngineError"]


@dataclass(frozen=True)
class Sampling:
    """A session's sampling policy: full-vocabulary sampling at `temperature`, nucleus `top_p`, at most
    `max_tokens` sampled per call, and `seed` for reproducible draws (the same batch gives the same tokens).

    The session's policy applies to every call: what an agent asks for (its `temperature`, `top_p`, `seed`) is
    recorded but not applied, so the log-probabilities are those of the policy the trainer optimises. An agent's
    `max_tokens` may only lower the cap."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)) or not (
                0 < self.temperature < math.inf):
            raise ValueError(f"Sampling.temperature must be a positive number, got {self.temperature!r}: the "
                             "log-probabilities are taken under it")
        if isinstance(self.top_p, bool) or not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise ValueError(f"Sampling.top_p must be in (0, 1], got {self.top_p!r}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"Sampling.max_tokens must be a positive integer, got {self.max_tokens!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ValueError(f"Sampling.seed must be an integer or None, got {self.seed!r}")

    def as_dict(self) -> dict[str, Any]:
        return {"temperature": float(self.temperature), "top_p": float(self.top_p), "max_tokens": self.max_tokens,
                "seed": self.seed}


@dataclass(frozen=True)
class GenerationRequest:
    """One call: the prompt's token ids and the sampling to draw the completion with (`sampling.max_tokens`
    already fitted to the engine's context)."""

    prompt_ids: list[int]
    sampling: Sampling


@dataclass(frozen=True)
class Generation:
    """What the engine sampled: the completion's token ids (the end-of-turn token included when the model chose
    to stop), the log-probability of each under the sampling temperature, and why it ended (`stop` or
    `length`)."""

    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class EngineError(RuntimeError):
    """The engine failed a batch, or answered without the token ids or log-probabilities a trace needs."""


class Engine(Protocol):
    """An engine the proxy samples from.

    `tokenizer`: a transformers tokenizer with the model's chat template (the proxy renders conversations with
    it); `model_name`: the id `/v1/models` lists; `max_context`: prompt plus completion tokens, at most (None:
    no limit known); `chat_template_kwargs`: extra variables for the chat template (`enable_thinking`, ...)."""

    tokenizer: Any
    model_name: str
    max_context: int | None
    chat_template_kwargs: dict[str, Any]

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        """One `Generation` per request, in order."""
        ...
