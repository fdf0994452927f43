"""The model that plays, as `envkit train` and `envkit eval` both see it.

Its defaults (`model_defaults`: the episode budget, and the tiny model's training recipe), its chat template
arguments, the play settings a trained model's folder keeps, and loading it for play (`load_model`: a saved
folder, a Hub id, or `tiny` built as `envkit train` builds it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..environment import Environment
from .binding import ServedEnvironment
from .tasks import train_tasks, training_rows

__all__ = ["SEED_EPISODES", "TINY", "TINY_GAME_STEPS", "TINY_LR_WARMUP_STEPS", "PLAY_SETTINGS_FILE", "model_defaults",
           "chat_template_kwargs", "load_play_settings", "load_model"]

#: The name that stands for the tiny model built on the spot (`--model tiny`).
TINY = "tiny"
#: Rows drawn from seeds when neither a dataset, a split nor --num-episodes says how many.
SEED_EPISODES = 64
#: The tiny model's default steps on environments whose episodes are whole games (an episode length).
TINY_GAME_STEPS = 40
#: The tiny model's learning rate rises linearly to its value over this many first steps (see `model_defaults`).
TINY_LR_WARMUP_STEPS = 3
#: The file in a trained model's folder that keeps its episode budget and chat template arguments.
PLAY_SETTINGS_FILE = "envkit_play.json"


def model_defaults(tiny: bool, episode_length: int | None = None, episode_tokens: int | None = None
                   ) -> dict[str, Any]:
    """The defaults that depend on the model and on the environments' episodes.

    Laptop-sized for `tiny`, TRL's for a real model. `episode_length`: the most tool calls an episode
    of the environments takes (their `episode_length` in `/metadata`), or None when none declares one;
    `episode_tokens`: the longest tiny-model warm-up episode in tokens. With a length, the turn budget
    is that length plus two (room for refused calls); the tiny model's token budget is its warm-up
    episodes' length with a quarter to spare, any other model's 128 tokens a turn (1,024 at least).
    Without: 3 turns and 128 tokens for the tiny model, 10 turns and 1,024 tokens for others. The tiny
    model plays 32 episodes a step in GRPO groups of 16 (with 16 in groups of 8 the advantages were noisy
    enough that the main job's seeds ended anywhere from 2.5 to 4.1 times their first steps' reward); it takes
    30 steps at 1.5e-3 where episodes have no set length (echo), and `TINY_GAME_STEPS` steps at 2e-4 on whole
    games. (Catch's sampled reward rises faster at 1e-3, +0.28 to +0.58 over seeds 0-2, but its greedy play
    catches 18/30 test balls before and after, against 24/30 after a run at 2e-4; on Wordle 1e-3 taught the model
    to stop calling tools, and 5e-4 won fewer test games after training than before on two seeds of three.) Its
    learning rate rises to that over `TINY_LR_WARMUP_STEPS` steps: Adam's first steps are about the rate times
    the sign of the gradient for every weight of the 140K-parameter model (initialised at std 0.02). At 2e-3
    echo's seed 1 stopped emitting tool calls after its first step, and seed 2, with 2e-3 reached over 5 steps,
    at its seventh.

    `envkit eval` plays with the same episode budget (`max_completion_length`, `max_tool_calling_iterations`).
    """
    game = bool(episode_length)
    if tiny:
        turns = episode_length + 2 if game else 3
        tokens = max(128, -(-int(episode_tokens * 1.25) // 32) * 32) if episode_tokens else 128
    else:
        turns = max(10, episode_length + 2) if game else 10
        tokens = max(1024, 128 * (episode_length + 2)) if game else 1024
    return {
        "max_steps": (TINY_GAME_STEPS if game else 30) if tiny else 200,
        "learning_rate": (2e-4 if game else 1.5e-3) if tiny else 1e-6,
        "num_generations": 16 if tiny else 8,
        "batch_size": 32 if tiny else 8,
        "max_completion_length": tokens,
        "max_tool_calling_iterations": turns,
    }


def chat_template_kwargs(tiny: bool, enable_thinking: bool | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    """`chat_template_kwargs` for TRL, with `enable_thinking` folded in (the tiny model thinks never)."""
    kwargs = dict(extra)
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    elif tiny:
        kwargs.setdefault("enable_thinking", False)
    return kwargs


def load_play_settings(model: str) -> dict[str, Any]:
    """What `envkit train` saved with a model folder (`envkit.train.runner.save_play_settings`); empty for anything
    else."""
    path = Path(model).expanduser() / PLAY_SETTINGS_FILE
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def load_model(model: str, classes: Mapping[str, type[ServedEnvironment]], prompts: Mapping[str, str], seed: int,
               say: Callable[[str], None], players: Mapping[str, type[Environment]] | None = None
               ) -> tuple[Any, Any, int | None]:
    """`(model, tokenizer, warm-up episode tokens)` in evaluation mode, on the GPU when there is one.

    `tiny` is the model `envkit train --model tiny --seed SEED` starts from: built from the same scripted
    episodes (the first rows of the same dataset: each environment's `train` tasks, else seeds; whole games with
    the solver of the environments in `players`), so its row is the "before training" row. The third value, the longest warm-up episode in
    tokens, is None for any other model.
    """
    import torch

    on_gpu = torch.cuda.is_available()
    started = time.perf_counter()
    if model == TINY:
        from .tiny import TinyModelSpec, build_tiny_model, describe

        if not on_gpu:
            torch.set_num_threads(1)  # as in training: a 100K-parameter model loses more to threads than it gains
        tasks = {name: train_tasks(cls.url) for name, cls in classes.items()}
        rows = training_rows(prompts, tasks, None, seed, SEED_EPISODES)
        loaded, tokenizer, figures = build_tiny_model(classes, rows, TinyModelSpec(seed=seed), players=players)
        say(f"{describe(figures)} ({time.perf_counter() - started:.1f}s)")
        episode_tokens: int | None = int(figures["episode_tokens"])
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(model)
        loaded = AutoModelForCausalLM.from_pretrained(model, dtype="auto")
        if on_gpu:
            loaded = loaded.to("cuda")
        say(f"loaded {model} ({sum(p.numel() for p in loaded.parameters()) / 1e6:.1f}M parameters, "
            f"{time.perf_counter() - started:.1f}s)")
        episode_tokens = None
    loaded.eval()
    return loaded, tokenizer, episode_tokens
