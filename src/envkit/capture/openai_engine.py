"""`OpenAIEngine`: samples from an external OpenAI-compatible server that takes and returns token ids.

The proxy owns the prompt's token ids, so this engine sends them as they are, to the server's completions route
(`POST {base_url}/completions` with `prompt` a list of ids): no text travels, and the server does not render or
tokenise the conversation again. It asks for what a trace needs, as vLLM (0.31, CPU build too) names it:
`return_token_ids` (the prompt ids it saw, `prompt_token_ids`, and the sampled ones, `token_ids`), `logprobs: 0`
(the sampled token's log-probability, no alternatives) and `return_tokens_as_token_ids` (each logprob entry's
token as `token_id:N`, read when a server leaves `token_ids` out). A batch is sent as concurrent requests: the
server batches them itself. A server that answers without ids or log-probabilities, or with prompt ids other
than those sent, fails the call (`EngineError`).

vLLM returns log-probabilities of the raw model output unless served with `--logprobs-mode processed_logprobs`
(after temperature): serve it that way so that the trace holds the sampling policy's log-probabilities.
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from .engine import EngineError, Generation, GenerationRequest

__all__ = ["OpenAIEngine"]


def _sampled_ids(choice: dict[str, Any]) -> list[int] | None:
    ids = choice.get("token_ids")
    if isinstance(ids, list):
        return ids
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if isinstance(tokens, list) and all(isinstance(token, str) and token.startswith("token_id:") for token in tokens):
        return [int(token.removeprefix("token_id:")) for token in tokens]
    return None


class OpenAIEngine:
    """An engine behind `base_url` (".../v1") serving `model`.

    `tokenizer`: the model's tokenizer with its chat template (default: loaded from `model`, a local folder such
    as the one `vllm serve` was given); `api_key`: sent as a bearer token when set; `max_context`: the server's
    context length when known."""

    def __init__(self, base_url: str, model: str, *, tokenizer: Any = None, api_key: str | None = None,
                 max_context: int | None = None, chat_template_kwargs: dict[str, Any] | None = None,
                 timeout_s: float = 600.0) -> None:
        if tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(model)
        self.base_url = base_url.rstrip("/")
        self.model_name = model
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self._client: Any = None

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        import httpx

        if self._client is None or self._client.is_closed:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False, headers=self.headers,
                                             limits=httpx.Limits(max_connections=256))
        return list(await asyncio.gather(*(self._one(self._client, request) for request in requests)))

    async def _one(self, client: Any, request: GenerationRequest) -> Generation:
        import httpx

        sampling = request.sampling
        body: dict[str, Any] = {"model": self.model_name, "prompt": request.prompt_ids,
                                "max_tokens": sampling.max_tokens, "temperature": sampling.temperature,
                                "top_p": sampling.top_p, "top_k": -1, "logprobs": 0, "return_token_ids": True,
                                "return_tokens_as_token_ids": True, "skip_special_tokens": False}
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        try:
            answer = await client.post(f"{self.base_url}/completions", json=body)
        except httpx.HTTPError as error:
            raise EngineError(f"the engine at {self.base_url} did not answer: {error!r}") from error
        if answer.status_code != 200:
            raise EngineError(f"the engine at {self.base_url} answered {answer.status_code}: {answer.text[:300]}")
        try:
            data = answer.json()
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError) as error:
            raise EngineError(f"the engine at {self.base_url} answered no completion choice") from error
        seen = data.get("prompt_token_ids", choice.get("prompt_token_ids"))
        if seen is not None and list(seen) != list(request.prompt_ids):
            raise EngineError(f"the engine at {self.base_url} reports other prompt ids than it was sent")
        ids = _sampled_ids(choice)
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is None or not isinstance(logprobs, list) or len(logprobs) != len(ids) or not all(
                isinstance(value, (int, float)) and not isinstance(value, bool) for value in logprobs):
            raise EngineError(f"the engine at {self.base_url} returned no sampled token ids with one "
                              "log-probability each: it must support return_token_ids and logprobs (vLLM does)")
        return Generation(completion_ids=[int(token) for token in ids], logprobs=[float(value) for value in logprobs],
                          finish_reason="length" if choice.get("finish_reason") == "length" else "stop")

    async def aclose(self) -> None:
        """Close the connections to the server (on the event loop that generated; the proxy does it as it
        closes)."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
