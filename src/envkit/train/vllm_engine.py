"""The capture proxy's engine on `envkit train --agent --vllm-mode colocate`: the trainer's own colocated vLLM.

    engine = ColocatedVLLMEngine(trainer.vllm_generation.llm, trainer.processing_class, chat_template_kwargs)

TRL syncs the trainer's weights into this engine before each generation batch (`rollout_func` included), so the
agents sample from the policy as it is at this step. Each request is a token prompt; vLLM returns the sampled ids
and, with TRL's `logprobs_mode="processed_logprobs"`, each one's log-probability under the sampling temperature
(the full vocabulary: `top_k` off).

vLLM's engine runs on the thread that owns it, the trainer's (its CPU build checks that the attention metadata
and the kernels see the same thread count): `generate`, called from the proxy's thread, queues each batch, and
the trainer's thread runs the queued batches in `serve_until` while it waits for the rollouts.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

__all__ = ["ColocatedVLLMEngine"]


class ColocatedVLLMEngine:
    """An engine (`envkit.capture.Engine`) over a `vllm.LLM` in this process and the model's tokenizer."""

    def __init__(self, llm: Any, tokenizer: Any, *, model_name: str = "policy",
                 chat_template_kwargs: dict[str, Any] | None = None) -> None:
        self.llm = llm
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.max_context: int | None = int(llm.llm_engine.model_config.max_model_len)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self._lock = threading.Lock()
        self._jobs: queue.Queue[tuple[list[Any], Future[list[Any]]]] = queue.Queue()

    async def generate(self, requests: Sequence[Any]) -> list[Any]:
        done: Future[list[Any]] = Future()
        self._jobs.put((list(requests), done))
        return await asyncio.wrap_future(done)

    def serve_until(self, waited: Sequence[Future[Any]]) -> None:
        """Run the queued batches on this thread (the one that owns vLLM) until every future of `waited` is done."""
        while not all(future.done() for future in waited):
            try:
                requests, done = self._jobs.get(timeout=0.02)
            except queue.Empty:
                continue
            try:
                done.set_result(self.generate_now(requests))
            except Exception as error:  # noqa: BLE001 - the proxy answers the calls of that batch with it
                done.set_exception(error)

    def generate_now(self, requests: Sequence[Any]) -> list[Any]:
        """`generate`, in the calling thread."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        from ..capture import EngineError, Generation

        prompts = [TokensPrompt(prompt_token_ids=list(request.prompt_ids)) for request in requests]
        params = [SamplingParams(temperature=request.sampling.temperature, top_p=request.sampling.top_p, top_k=0,
                                 max_tokens=request.sampling.max_tokens, seed=request.sampling.seed, logprobs=0)
                  for request in requests]
        with self._lock:
            outputs = self.llm.generate(prompts, params, use_tqdm=False)
        results = []
        for output in outputs:
            sample = output.outputs[0]
            ids = list(sample.token_ids)
            if sample.logprobs is None or len(sample.logprobs) != len(ids):
                raise EngineError("the colocated vLLM engine returned no log-probability for some sampled ids")
            logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs, ids, strict=True)]
            results.append(Generation(completion_ids=ids, logprobs=logprobs,
                                      finish_reason="length" if sample.finish_reason == "length" else "stop"))
        return results
