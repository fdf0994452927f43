"""A small OpenAI-compatible completions server in vLLM's shape, for `OpenAIEngine`'s tests where vLLM is not
installed: `POST /v1/completions` takes the prompt as token ids and answers with what vLLM 0.31 returns when
asked (`return_token_ids`, `logprobs: 0`, `return_tokens_as_token_ids`): the choice's `prompt_token_ids` and
`token_ids`, and `logprobs.tokens` as `token_id:N` with `token_logprobs`. The tokens come from a
`TransformersEngine` over the tiny model.

`mode` changes what it leaves out, to see the engine cope or refuse: "vllm" (everything), "no_token_ids"
(only the `token_id:N` strings carry the sampled ids), "no_logprobs" (a server that cannot return them), "null_logprobs"
(a `null` in place of each log-probability, which vLLM's schema allows).
"""

from __future__ import annotations

import uuid
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from envkit.capture import GenerationRequest, Sampling, TransformersEngine


def completions_app(engine: TransformersEngine, mode: str = "vllm") -> Starlette:
    seen: list[dict[str, Any]] = []

    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        seen.append(body)
        sampling = Sampling(temperature=body["temperature"], top_p=body["top_p"], max_tokens=body["max_tokens"],
                            seed=body.get("seed"))
        [generation] = await engine.generate([GenerationRequest(list(body["prompt"]), sampling)])
        ids = generation.completion_ids
        logprobs = [None] * len(ids) if mode == "null_logprobs" else generation.logprobs
        choice: dict[str, Any] = {"index": 0, "text": engine.tokenizer.decode(ids),
                                  "finish_reason": generation.finish_reason, "stop_reason": None}
        if mode != "no_logprobs":
            choice["logprobs"] = {"tokens": [f"token_id:{token}" for token in ids],
                                  "token_logprobs": logprobs,
                                  "top_logprobs": [{f"token_id:{token}": value}
                                                   for token, value in zip(ids, logprobs)],
                                  "text_offset": [0] * len(ids)}
        if mode == "vllm":
            choice |= {"prompt_token_ids": body["prompt"], "token_ids": ids}
        return JSONResponse({"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": 0,
                             "model": body["model"], "choices": [choice],
                             "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids),
                                       "total_tokens": len(body["prompt"]) + len(ids)}})

    app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    app.state.seen = seen
    return app
