"""The trainer of `envkit train --agent`: TRL's `GRPOTrainer` whose rollouts are captured agent episodes.

    trainer, agents = agent_trainer(settings, players, model, tokenizer, config, dataset, tally)

TRL hands `rollout_func` the batch's prompts only; the rollouts also need each row's reset arguments (its task),
so the trainer keeps the batch's rows (`batch_rows`) as TRL's `_generate_and_score_completions` receives them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..environment import Environment
from ..errors import ConfigurationError
from ..play.binding import Tally
from .agent_rollouts import AgentRollouts, AgentSetup
from .captured import AgentOutcome, CapturedGRPOTrainer, captured_rollout_func, harness_reward
from .settings import TrainSettings

__all__ = ["AgentGRPOTrainer", "agent_trainer", "rollout_reward_fn", "TRACES_FILE"]

TRACES_FILE = "traces.jsonl"


class AgentGRPOTrainer(CapturedGRPOTrainer):
    """TRL's `GRPOTrainer` over captured rollouts (`CapturedGRPOTrainer`), keeping the dataset rows of the batch
    being generated in `batch_rows`."""

    batch_rows: list[dict[str, Any]] = []

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self.batch_rows = [dict(row) for row in inputs]
        return super()._generate_and_score_completions(inputs)


def rollout_reward_fn(spec: str) -> Callable[[AgentOutcome], float | None]:
    """`--rollout-reward module:fn` (a module importable from here or the working folder)."""
    from ..app.targets import import_attribute

    if ":" not in spec:
        raise ConfigurationError(f"--rollout-reward {spec!r}: name a function as module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    function = import_attribute(spec)
    if not callable(function):
        raise ConfigurationError(f"--rollout-reward {spec}: {function!r} is not a function")
    return function


def agent_trainer(settings: TrainSettings, players: Mapping[str, type[Environment]], model: Any, tokenizer: Any,
                  config: Any, dataset: Any, tally: Tally) -> tuple[AgentGRPOTrainer, AgentRollouts]:
    """The trainer for `settings.agent` on the environments served here (`players`), and its rollouts (close them
    when training ends). `settings` must be fitted (its turn and token budgets set)."""
    setup = AgentSetup(command=settings.agent or "", timeout_s=settings.agent_timeout,
                       max_calls=int(settings.max_tool_calling_iterations or 1), temperature=settings.temperature,
                       max_tokens=int(settings.max_completion_length or 1),
                       reward_fn=rollout_reward_fn(settings.rollout_reward) if settings.rollout_reward else None)
    path = Path(settings.output_dir) / TRACES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    agents = AgentRollouts(players, setup, path, tally, rows_of=lambda trainer: trainer.batch_rows)
    trainer = AgentGRPOTrainer(model=model, reward_funcs=harness_reward, args=config, train_dataset=dataset,
                               processing_class=tokenizer, rollout_func=captured_rollout_func(agents))
    return trainer, agents
