"""Loading a local model for `envkit eval`: a saved folder, a Hub id, or `tiny` built as `envkit train` builds it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from ..train.binding import ServedEnvironment
from ..train.data import env_rows
from ..train.settings import SEED_EPISODES, TINY

__all__ = ["load_model"]


def load_model(model: str, classes: Mapping[str, type[ServedEnvironment]], prompts: Mapping[str, str], seed: int,
               say: Callable[[str], None]) -> tuple[Any, Any]:
    """`(model, tokenizer)` in evaluation mode, on the GPU when there is one.

    `tiny` is the model `envkit train --model tiny --seed SEED` starts from: built from the same scripted
    episodes (the first rows of the same seeded dataset), so its row is the "before training" row.
    """
    import torch

    on_gpu = torch.cuda.is_available()
    started = time.perf_counter()
    if model == TINY:
        from ..train.tiny import TinyModelSpec, build_tiny_model, describe

        if not on_gpu:
            torch.set_num_threads(1)  # as in training: a 100K-parameter model loses more to threads than it gains
        rows = env_rows(prompts, SEED_EPISODES, seed)
        loaded, tokenizer, figures = build_tiny_model(classes, rows, TinyModelSpec(seed=seed))
        say(f"{describe(figures)} ({time.perf_counter() - started:.1f}s)")
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype="auto")
        if on_gpu:
            loaded = loaded.to("cuda")
        say(f"loaded {model} ({sum(p.numel() for p in loaded.parameters()) / 1e6:.1f}M parameters, "
            f"{time.perf_counter() - started:.1f}s)")
    loaded.eval()
    return loaded, tokenizer
