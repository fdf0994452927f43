"""Generation on CPU: vLLM's CPU build against transformers' `generate`, for one model folder. Prints one JSON line.

    python benchmarks/vllm_cpu.py build-medium FOLDER TINY      # a ~26M-parameter Qwen3 (random weights), saved
    python benchmarks/vllm_cpu.py vllm FOLDER [--eager]         # vLLM: start-up, tokens/s, peak memory
    python benchmarks/vllm_cpu.py transformers FOLDER           # transformers: load time, tokens/s, peak memory

Each engine runs in its own process (peak memory is the process's). Both generate the same batch: 16 prompts
of 64 tokens, 128 new tokens each (EOS ignored, so every sequence is as long), sampled at temperature 1;
tokens/s counts new tokens over the whole batch, best of 3 timed rounds after one untimed round. `--eager`
sets `VLLM_CPU_CI_ENV=1` (the model runs eagerly instead of being compiled by inductor first). The medium
model borrows the tokenizer (and chat template) of a tiny model folder built by `envkit train`; its weights are
random, which does not change the cost of a token.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import time
from pathlib import Path

BATCH, PROMPT_TOKENS, NEW_TOKENS, ROUNDS = 16, 64, 128, 3


def prompts(vocab_size: int) -> list[list[int]]:
    import random

    rng = random.Random(0)
    return [[rng.randrange(10, vocab_size) for _ in range(PROMPT_TOKENS)] for _ in range(BATCH)]


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def build_medium(tiny: Path, folder: Path) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    vocab = json.loads((tiny / "config.json").read_text())["vocab_size"]
    config = Qwen3Config(vocab_size=vocab, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, max_position_embeddings=4096,
                         tie_word_embeddings=True, eos_token_id=2, pad_token_id=0)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (tiny / name).exists():
            shutil.copy(tiny / name, folder / name)
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))


def run_vllm(folder: Path) -> dict[str, float]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    for name, value in {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                        "MASTER_PORT": "29561"}.items():
        os.environ.setdefault(name, value)
    from vllm import LLM, SamplingParams

    started = time.perf_counter()
    llm = LLM(model=str(folder), distributed_executor_backend="external_launcher", max_model_len=1024,
              max_num_batched_tokens=4096)
    startup = time.perf_counter() - started
    batch = [{"prompt_token_ids": ids} for ids in prompts(llm.llm_engine.model_config.get_vocab_size())]
    params = SamplingParams(temperature=1.0, max_tokens=NEW_TOKENS, ignore_eos=True, seed=0)

    def once() -> float:
        began = time.perf_counter()
        outputs = llm.generate(batch, params, use_tqdm=False)
        assert sum(len(output.outputs[0].token_ids) for output in outputs) == BATCH * NEW_TOKENS
        return time.perf_counter() - began

    once()
    best = min(once() for _ in range(ROUNDS))
    return {"startup_s": startup, "tokens_per_s": BATCH * NEW_TOKENS / best}


def run_transformers(folder: Path) -> dict[str, float]:
    import torch
    from transformers import AutoModelForCausalLM

    started = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    startup = time.perf_counter() - started
    ids = torch.tensor(prompts(model.config.vocab_size))

    def once() -> float:
        began = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0,
                                 max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, pad_token_id=0)
        assert out.shape[1] - ids.shape[1] == NEW_TOKENS
        return time.perf_counter() - began

    once()
    best = min(once() for _ in range(ROUNDS))
    return {"startup_s": startup, "tokens_per_s": BATCH * NEW_TOKENS / best}


def main(argv: list[str]) -> None:
    mode, folder = argv[0], Path(argv[1])
    if mode == "build-medium":
        build_medium(Path(argv[2]), folder)
        return
    if "--eager" in argv:
        os.environ["VLLM_CPU_CI_ENV"] = "1"
    import torch

    figures = run_vllm(folder) if mode == "vllm" else run_transformers(folder)
    print(json.dumps({"engine": mode + (" (eager)" if "--eager" in argv else ""), "model": folder.name,
                      "threads": torch.get_num_threads(), **{k: round(v, 2) for k, v in figures.items()},
                      "peak_rss_mib": round(peak_mib())}))


if __name__ == "__main__":
    main(sys.argv[1:])
