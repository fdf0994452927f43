"""Does colocated vLLM generate with the trainer's current weights? A script: vLLM's engine wants its own process.

    python tests/vllm_sync_probe.py OUTPUT_DIR STEPS SKIP_SYNC_FROM LEARNING_RATE

Trains the tiny model on echo (served here) for STEPS GRPO steps of 16 episodes (groups of 8) with
`--vllm-mode colocate`, at LEARNING_RATE from the first step (no warm-up). Just before
each step's first generation (after TRL's weight sync), it scores one fixed tool-call completion twice: the
sum of its tokens' log-probabilities under the engine (vLLM's prompt log-probabilities) and under the
trainer's model (a forward pass). From step SKIP_SYNC_FROM on, TRL's sync is skipped, as a broken sync
would be. Prints one JSON object: the steps' figures and the run's summary.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from contextlib import ExitStack
from typing import Any

FIXED = ('<|im_start|>user\nEcho the word hello.<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n'
         '<tool_call>\n{"name": "echo", "arguments": {"message": "hello world"}}\n</tool_call><|im_end|>\n')
PROMPT_END = "<|im_start|>assistant\n"


def completion_logprobs(trainer: Any) -> tuple[float, float]:
    """(engine, trainer) log-probability of FIXED's assistant turn given its prompt."""
    import torch
    from vllm import SamplingParams

    tokenizer = trainer.processing_class
    ids = tokenizer(FIXED, add_special_tokens=False)["input_ids"]
    start = len(tokenizer(FIXED[:FIXED.index(PROMPT_END) + len(PROMPT_END)], add_special_tokens=False)["input_ids"])
    llm = trainer.vllm_generation.llm
    output = llm.generate([{"prompt_token_ids": ids}], SamplingParams(max_tokens=1, prompt_logprobs=0),
                          use_tqdm=False)[0]
    engine = sum(output.prompt_logprobs[i][ids[i]].logprob for i in range(start, len(ids)))
    with torch.no_grad():
        logits = trainer.model(torch.tensor([ids])).logits[0].float()
    scores = torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    return engine, float(scores[start - 1:].sum())


def main(output_dir: str, steps: int, skip_sync_from: int, learning_rate: float) -> None:
    from envkit.play.embedded import serve_envs
    from envkit.train.runner import prepare, train
    from envkit.train.settings import TrainSettings

    settings = TrainSettings(env=["echo"], vllm_mode="colocate", max_steps=steps, learning_rate=learning_rate,
                             batch_size=16, num_generations=8, grpo={"warmup_steps": 0},
                             output_dir=output_dir,
                             overwrite=True, transcripts_per_step=0, save_model=False).resolved()
    figures: list[dict[str, Any]] = []
    with ExitStack() as stack:
        urls = stack.enter_context(serve_envs(settings.env, settings.batch_size))
        prepared = prepare(settings, urls, say=lambda message: print(message, file=sys.stderr), show_steps=False)
        trainer = prepared.trainer
        generation = trainer.vllm_generation
        sync, generate = generation.sync_weights, generation.generate

        def sync_unless_broken() -> None:
            if trainer.state.global_step + 1 < skip_sync_from:
                sync()

        def measured_generate(*args: Any, **kwargs: Any) -> Any:
            step = trainer.state.global_step + 1
            if not figures or figures[-1]["step"] != step:
                engine, policy = completion_logprobs(trainer)
                figures.append({"step": step, "synced": step < skip_sync_from, "engine": engine, "trainer": policy})
            return generate(*args, **kwargs)

        generation.sync_weights, generation.generate = sync_unless_broken, measured_generate
        summary = train(prepared)
    print(json.dumps({"steps": figures, "summary": dataclasses.asdict(summary)}, default=str))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]))
