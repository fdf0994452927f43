"""`envkit eval` plays a model exactly as TRL's GRPOTrainer plays it in training.

The same tiny model, the same test games (wordle, catch) on a real server, greedy decoding on both sides:
TRL's own rollout code (`GRPOTrainer._generate_and_score_completions`, TRL 1.16, the code
`envkit train` runs) and envkit's evaluation loop must produce the same messages and the same
token ids, turn for turn. Offline; the model is built here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from envkit.play.games import split_games
from envkit.play.loop import play
from envkit.play.model_player import ModelPlayer
from envkit.app.targets import app_from_environment, resolve_target
from envkit.testing import running_server
from envkit.play.binding import bind
from envkit.play.tasks import env_rows, task_prompt

GAMES = 4
LENGTH, ITERATIONS = 128, 3
CHAT = {"enable_thinking": False}


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("env", ["wordle", "catch"])
def test_eval_loop_reproduces_trl_rollouts_token_for_token(env: str, tmp_path: Path) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from envkit.play.tiny import TinyModelSpec, build_tiny_model

    torch.set_num_threads(1)
    target = resolve_target(env)
    with running_server(app_from_environment(target.env_class, env_name=env, max_concurrent_envs=16)) as url:
        cls = bind(url, name=env)
        prompt = task_prompt(env, cls.metadata)
        model, tokenizer, _ = build_tiny_model({env: cls}, env_rows({env: prompt}, 16, 0), TinyModelSpec())
        games = split_games(env, target.env_class, "test", GAMES, prompt)

        player = ModelPlayer("tiny", model, tokenizer, max_completion_length=LENGTH, chat_template_kwargs=CHAT)
        ours = play(player, games, {env: cls}, max_tool_calling_iterations=ITERATIONS)

        seen: dict[str, Any] = {}

        def record(completions: list[Any], completion_ids: list[list[int]], **kwargs: Any) -> list[float]:
            seen.update(completions=completions, completion_ids=completion_ids)
            return [0.0] * len(completions)

        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        rows = [{"prompt": game.prompt, **game.task} for game in games for _ in range(2)]   # 2 generations each
        config = GRPOConfig(output_dir=str(tmp_path), max_completion_length=LENGTH,
                            max_tool_calling_iterations=ITERATIONS, num_generations=2,
                            per_device_train_batch_size=2 * GAMES, chat_template_kwargs=CHAT,
                            generation_kwargs={"do_sample": False}, use_cpu=True, report_to=[], logging_steps=1,
                            save_strategy="no", beta=0.0, max_steps=1)
        trainer = GRPOTrainer(model=model, reward_funcs=record, args=config, train_dataset=Dataset.from_list(rows),
                              processing_class=tokenizer, environment_factory=type(cls.__name__, (cls,), {}))
        model.eval()
        trainer._generate_and_score_completions(rows)
        cls._close_all()

    assert len(seen["completions"]) == 2 * GAMES
    for number, conversation in enumerate(ours):
        trl_messages = seen["completions"][2 * number]
        trl_ids = seen["completion_ids"][2 * number]
        our_messages = conversation.messages[len(games[number].prompt):]
        assert our_messages == trl_messages, f"game {number}"
        assert conversation.state["completion_ids"] == list(trl_ids), f"game {number}"
    assert any(message.get("tool_calls") for conversation in ours for message in conversation.messages)
